//! The plan: the ordered steps that turn the switch's actual state into the desired state.
//!
//! Pure: it diffs two [`State`]s. Entries whose keys match but whose contents differ are
//! modified in place, so counters and conntrack references survive; a flow whose cookie
//! changes is added again over itself instead, as an OpenFlow 1.3 modify keeps the cookie
//! the switch has. Ordering keeps every
//! reference valid at every step: groups are added (then modified) before the flows and
//! groups that use them, and flows are removed before the groups they used.

use std::collections::BTreeMap;

/// What an entry refers to: the groups it sends packets to.
pub trait GroupRefs {
    /// Ids of the groups this entry uses.
    fn group_refs(&self) -> Vec<u32>;
}

/// What a flow entry carries that a modify cannot change on the switch.
pub trait FlowCookie {
    /// The flow's cookie.
    fn cookie(&self) -> u64;
}

impl<T: FlowCookie + ?Sized> FlowCookie for &T {
    fn cookie(&self) -> u64 {
        (**self).cookie()
    }
}

/// Flows by key and groups by id, as wanted or as found on a switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State<K, F, G> {
    /// Flows.
    pub flows: BTreeMap<K, F>,
    /// Groups.
    pub groups: BTreeMap<u32, G>,
}

impl<K, F, G> Default for State<K, F, G> {
    fn default() -> Self {
        Self {
            flows: BTreeMap::new(),
            groups: BTreeMap::new(),
        }
    }
}

/// One change to a switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<K, F, G> {
    /// Add a group.
    AddGroup(u32, G),
    /// Replace a group's buckets.
    ModifyGroup(u32, G),
    /// Add a flow.
    AddFlow(K, F),
    /// Replace a flow's actions, keeping its counters (and its cookie, which is the same).
    ModifyFlow(K, F),
    /// Replace a flow whose cookie changes: an add over it (`OFPFC_ADD` replaces the flow of
    /// the same table, priority and match whole, cookie included, and restarts its
    /// counters). In OpenFlow 1.3 a modify leaves the cookie as it was (OVS takes a
    /// modify's cookie as a new one only in OpenFlow 1.1), so the switch would keep the
    /// previous owner's.
    ReplaceFlow(K, F),
    /// Delete a flow (strictly: this key only).
    DeleteFlow(K),
    /// Delete a group.
    DeleteGroup(u32),
}

impl<K: Clone, F: Clone, G: Clone> Step<&K, &F, &G> {
    /// The step with its key and entries copied.
    pub fn cloned(self) -> Step<K, F, G> {
        match self {
            Step::AddGroup(id, g) => Step::AddGroup(id, g.clone()),
            Step::ModifyGroup(id, g) => Step::ModifyGroup(id, g.clone()),
            Step::AddFlow(k, f) => Step::AddFlow(k.clone(), f.clone()),
            Step::ModifyFlow(k, f) => Step::ModifyFlow(k.clone(), f.clone()),
            Step::ReplaceFlow(k, f) => Step::ReplaceFlow(k.clone(), f.clone()),
            Step::DeleteFlow(k) => Step::DeleteFlow(k.clone()),
            Step::DeleteGroup(id) => Step::DeleteGroup(id),
        }
    }
}

/// The ordered steps from actual to desired.
pub fn plan<K, F, G>(desired: &State<K, F, G>, actual: &State<K, F, G>) -> Vec<Step<K, F, G>>
where
    K: Ord + Clone,
    F: PartialEq + Clone + GroupRefs + FlowCookie,
    G: PartialEq + Clone + GroupRefs,
{
    let mut steps = Vec::new();
    // Groups that other new or changed groups point at must exist first: add in dependency
    // order (a group after the groups it references).
    let mut to_add: Vec<u32> = desired
        .groups
        .keys()
        .filter(|id| !actual.groups.contains_key(id))
        .copied()
        .collect();
    order_by_dependencies(&mut to_add, &desired.groups);
    for id in to_add {
        if let Some(group) = desired.groups.get(&id) {
            steps.push(Step::AddGroup(id, group.clone()));
        }
    }
    let mut to_modify: Vec<u32> = desired
        .groups
        .iter()
        .filter(|(id, g)| actual.groups.get(id).is_some_and(|a| a != *g))
        .map(|(id, _)| *id)
        .collect();
    order_by_dependencies(&mut to_modify, &desired.groups);
    for id in to_modify {
        if let Some(group) = desired.groups.get(&id) {
            steps.push(Step::ModifyGroup(id, group.clone()));
        }
    }
    for (key, flow) in &desired.flows {
        match actual.flows.get(key) {
            None => steps.push(Step::AddFlow(key.clone(), flow.clone())),
            Some(found) if found != flow => {
                steps.push(changed_flow(found, key.clone(), flow.clone()))
            }
            Some(_) => {}
        }
    }
    for key in actual.flows.keys() {
        if !desired.flows.contains_key(key) {
            steps.push(Step::DeleteFlow(key.clone()));
        }
    }
    // Delete referrers before the groups they refer to.
    let mut to_delete: Vec<u32> = actual
        .groups
        .keys()
        .filter(|id| !desired.groups.contains_key(id))
        .copied()
        .collect();
    order_by_dependencies(&mut to_delete, &actual.groups);
    to_delete.reverse();
    steps.extend(to_delete.into_iter().map(Step::DeleteGroup));
    steps
}

/// The step that turns flow `found` into `flow` under `key`: a modify, or a replace when the
/// cookie changes.
pub fn changed_flow<K, F: FlowCookie, G>(found: &F, key: K, flow: F) -> Step<K, F, G> {
    if found.cookie() == flow.cookie() {
        Step::ModifyFlow(key, flow)
    } else {
        Step::ReplaceFlow(key, flow)
    }
}

/// Sorts `ids` so that each group comes after the groups (among `ids`) it references.
/// Cycles cannot be expressed in OpenFlow; if one is present the remaining ids keep their order.
fn order_by_dependencies<G: GroupRefs>(ids: &mut Vec<u32>, groups: &BTreeMap<u32, G>) {
    let pending: std::collections::BTreeSet<u32> = ids.iter().copied().collect();
    let mut placed = std::collections::BTreeSet::new();
    let mut ordered = Vec::with_capacity(ids.len());
    let mut remaining: Vec<u32> = ids.clone();
    while !remaining.is_empty() {
        let before = remaining.len();
        remaining.retain(|id| {
            let ready = groups.get(id).is_none_or(|g| {
                g.group_refs()
                    .iter()
                    .all(|r| !pending.contains(r) || placed.contains(r) || r == id)
            });
            if ready {
                placed.insert(*id);
                ordered.push(*id);
            }
            !ready
        });
        if remaining.len() == before {
            ordered.append(&mut remaining);
        }
    }
    *ids = ordered;
}

/// Applies steps to a state, as a switch would. Used to check plans; a step that a switch
/// would refuse (adding what exists, changing or deleting what does not) is an error.
pub fn apply<K, F, G>(state: &mut State<K, F, G>, steps: &[Step<K, F, G>]) -> Result<(), String>
where
    K: Ord + Clone + std::fmt::Debug,
    F: Clone + GroupRefs,
    G: Clone + GroupRefs,
{
    for step in steps {
        match step {
            Step::AddGroup(id, g) | Step::ModifyGroup(id, g) => {
                let exists = state.groups.contains_key(id);
                if exists == matches!(step, Step::AddGroup(..)) {
                    return Err(format!("{step_kind} of group {id}", step_kind = kind(step)));
                }
                check_refs(&g.group_refs(), state)?;
                state.groups.insert(*id, g.clone());
            }
            Step::AddFlow(k, f) | Step::ModifyFlow(k, f) | Step::ReplaceFlow(k, f) => {
                let exists = state.flows.contains_key(k);
                if exists == matches!(step, Step::AddFlow(..)) {
                    return Err(format!("{} of flow {k:?}", kind(step)));
                }
                check_refs(&f.group_refs(), state)?;
                state.flows.insert(k.clone(), f.clone());
            }
            Step::DeleteFlow(k) => {
                state
                    .flows
                    .remove(k)
                    .ok_or_else(|| format!("delete of missing flow {k:?}"))?;
            }
            Step::DeleteGroup(id) => {
                let used = state.flows.values().any(|f| f.group_refs().contains(id))
                    || state
                        .groups
                        .iter()
                        .any(|(other, g)| other != id && g.group_refs().contains(id));
                if used {
                    return Err(format!("group {id} deleted while still referenced"));
                }
                state
                    .groups
                    .remove(id)
                    .ok_or_else(|| format!("delete of missing group {id}"))?;
            }
        }
    }
    Ok(())
}

fn kind<K, F, G>(step: &Step<K, F, G>) -> &'static str {
    match step {
        Step::AddGroup(..) | Step::AddFlow(..) => "add of existing",
        Step::ModifyGroup(..) | Step::ModifyFlow(..) => "modify of missing",
        Step::ReplaceFlow(..) => "replace of missing",
        Step::DeleteFlow(..) | Step::DeleteGroup(..) => "delete",
    }
}

fn check_refs<K, F, G>(refs: &[u32], state: &State<K, F, G>) -> Result<(), String> {
    match refs.iter().find(|r| !state.groups.contains_key(r)) {
        Some(missing) => Err(format!("reference to missing group {missing}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A test entry: a version number and the groups it references.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Entry(u8, Vec<u32>);

    impl GroupRefs for Entry {
        fn group_refs(&self) -> Vec<u32> {
            self.1.clone()
        }
    }

    /// Versions 0–3 share a cookie, 4–7 the next one, and so on: some changes keep it.
    impl FlowCookie for Entry {
        fn cookie(&self) -> u64 {
            u64::from(self.0 / 4)
        }
    }

    type TestState = State<u16, Entry, Entry>;

    /// A consistent state: groups reference only lower-numbered groups; flows any group.
    fn state() -> impl Strategy<Value = TestState> {
        (
            proptest::collection::btree_map(
                0u32..12,
                (0u8..3, proptest::collection::vec(0u32..12, 0..3)),
                0..10,
            ),
            proptest::collection::btree_map(
                0u16..20,
                (0u8..3, proptest::collection::vec(0u32..12, 0..3)),
                0..15,
            ),
        )
            .prop_map(|(groups, flows)| {
                let ids: Vec<u32> = groups.keys().copied().collect();
                let groups = groups
                    .into_iter()
                    .map(|(id, (v, refs))| {
                        let refs = refs
                            .into_iter()
                            .filter(|r| *r < id && ids.contains(r))
                            .collect();
                        (id, Entry(v, refs))
                    })
                    .collect();
                let flows = flows
                    .into_iter()
                    .map(|(k, (v, refs))| {
                        (
                            k,
                            Entry(v, refs.into_iter().filter(|r| ids.contains(r)).collect()),
                        )
                    })
                    .collect();
                State { flows, groups }
            })
    }

    proptest! {
        #[test]
        fn applying_the_plan_yields_the_desired_state(desired in state(), actual in state()) {
            let steps = plan(&desired, &actual);
            let mut state = actual.clone();
            apply(&mut state, &steps).map_err(TestCaseError::fail)?;
            prop_assert_eq!(state, desired);
        }

        #[test]
        fn a_state_needs_no_steps_to_become_itself(s in state()) {
            prop_assert!(plan(&s, &s).is_empty());
        }
    }

    #[test]
    fn changed_entries_are_modified_in_place_and_ordered_around_references() {
        let actual: TestState = State {
            flows: [(1, Entry(0, vec![5])), (2, Entry(0, vec![]))].into(),
            groups: [(5, Entry(0, vec![]))].into(),
        };
        let desired: TestState = State {
            flows: [(1, Entry(1, vec![7])), (3, Entry(0, vec![]))].into(),
            groups: [(7, Entry(0, vec![]))].into(),
        };
        let steps = plan(&desired, &actual);
        assert_eq!(
            steps,
            vec![
                Step::AddGroup(7, Entry(0, vec![])),
                Step::ModifyFlow(1, Entry(1, vec![7])),
                Step::AddFlow(3, Entry(0, vec![])),
                Step::DeleteFlow(2),
                Step::DeleteGroup(5),
            ]
        );
    }

    #[test]
    fn a_flow_whose_cookie_changes_is_replaced_not_modified() {
        let actual: TestState = State {
            flows: [(1, Entry(0, vec![])), (2, Entry(0, vec![]))].into(),
            groups: BTreeMap::new(),
        };
        let desired: TestState = State {
            flows: [(1, Entry(4, vec![])), (2, Entry(3, vec![]))].into(),
            groups: BTreeMap::new(),
        };
        let steps = plan(&desired, &actual);
        assert_eq!(
            steps,
            vec![
                Step::ReplaceFlow(1, Entry(4, vec![])),
                Step::ModifyFlow(2, Entry(3, vec![])),
            ]
        );
        let mut state = actual.clone();
        apply(&mut state, &steps).unwrap();
        assert_eq!(state, desired);
        // Like a modify, a replace needs the flow to be there.
        assert!(apply(&mut State::default(), &steps[..1]).is_err());
    }
}
