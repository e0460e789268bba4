//! Flows and groups as svcflow wants them, keyed the way OpenFlow identifies them, and printed
//! exactly as `ovs-ofctl dump-flows --no-stats` and `dump-groups` print them.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

use openflow::instruction::{DisplayInstructions, Instruction};
use openflow::match_fmt::format_match;
use openflow::{Action, Match};

use crate::packed::{PackedInstructions, PackedMatch};
use crate::pipeline::reg;
use crate::plan::GroupRefs;

/// What identifies a flow in a table: table, priority and match.
///
/// The match is kept packed ([`PackedMatch`]): a big cluster holds hundreds of thousands of
/// keys on every node.
///
/// A key carries its hash, computed once as it is made: an update looks each flow's key up
/// in five or six maps (what the switch held, the flows' owners, the shared flows, the steps),
/// and hashing the packed match each time was 3–4 % of a first load's render. The hash is
/// seeded once per process at random, as the maps' own hashers are, so input cannot choose
/// keys that collide.
#[derive(Clone)]
pub struct FlowKey {
    /// Table id.
    pub table: u8,
    /// Priority.
    pub priority: u16,
    matches: PackedMatch,
    hash: u64,
}

/// The per-process seed of [`FlowKey`]'s hash.
fn key_hasher() -> &'static foldhash::fast::RandomState {
    static SEED: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
    SEED.get_or_init(foldhash::fast::RandomState::default)
}

impl PartialEq for FlowKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && self.table == other.table
            && self.priority == other.priority
            && self.matches == other.matches
    }
}

impl Eq for FlowKey {}

impl Hash for FlowKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl FlowKey {
    /// The key of a flow in `table` at `priority` with match `matches` (fields in OVS's
    /// canonical order).
    pub fn new(table: u8, priority: u16, matches: &Match) -> Self {
        let matches = PackedMatch::new(matches);
        let hash = key_hasher().hash_one((table, priority, &matches));
        FlowKey {
            table,
            priority,
            matches,
            hash,
        }
    }

    /// Its match.
    pub fn matches(&self) -> Match {
        self.matches.to_match()
    }

    /// The match's entry for `field`, if any.
    pub fn get(&self, field: openflow::Field) -> Option<openflow::OxmField> {
        self.matches.get(field)
    }
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowKey")
            .field("table", &self.table)
            .field("priority", &self.priority)
            .field("matches", &self.matches)
            .finish()
    }
}

impl Ord for FlowKey {
    /// By table, then priority (highest first), then the match's fields in order
    /// (`(field, value, mask)`, which is the packed bytes' order); allocates nothing.
    fn cmp(&self, other: &Self) -> Ordering {
        self.table
            .cmp(&other.table)
            .then_with(|| other.priority.cmp(&self.priority))
            .then_with(|| self.matches.cmp(&other.matches))
    }
}

impl PartialOrd for FlowKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What a flow does, and its cookie.
///
/// The instructions are kept packed ([`PackedInstructions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEntry {
    /// Cookie; see [`crate::pipeline::cookie`].
    pub cookie: u64,
    pub(crate) instructions: PackedInstructions,
}

impl FlowEntry {
    /// A flow with `cookie` that carries out `instructions`.
    pub fn new(cookie: u64, instructions: Vec<Instruction>) -> Self {
        FlowEntry {
            cookie,
            instructions: PackedInstructions::new(instructions),
        }
    }

    /// Its instructions.
    pub fn instructions(&self) -> Cow<'_, [Instruction]> {
        self.instructions.get()
    }

    /// Whether it has no instructions (drops what it matches).
    pub fn is_drop(&self) -> bool {
        self.instructions.is_empty()
    }
}

impl crate::plan::FlowCookie for FlowEntry {
    fn cookie(&self) -> u64 {
        self.cookie
    }
}

impl GroupRefs for FlowEntry {
    fn group_refs(&self) -> Vec<u32> {
        let mut refs = Vec::new();
        for instruction in self.instructions().iter() {
            if let Instruction::ApplyActions(actions) | Instruction::WriteActions(actions) =
                instruction
            {
                refs.extend(action_group_refs(actions));
            }
        }
        refs
    }
}

fn action_group_refs(actions: &[Action]) -> impl Iterator<Item = u32> + '_ {
    actions.iter().filter_map(|a| match a {
        Action::Group(id) => Some(*id),
        _ => None,
    })
}

/// Group types svcflow uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    /// Every bucket (an ELAN flood).
    All,
    /// One bucket by weighted hash (a service).
    Select,
}

/// A bucket: a weight and actions.
///
/// A service's bucket is always the same three (IPv4) or six (IPv6) actions: load the
/// endpoint's address and port into registers, and resubmit. One per endpoint is the bulk of a
/// big cluster's state, and as [`Action`]s each took about 320 bytes, so such buckets are kept
/// as their values (a few bytes) and their actions are built when asked for. Any other list
/// is kept as it is. [`Bucket::new`] chooses, so equal actions always compare equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Weight (select groups); 0 for `all` groups.
    pub weight: u16,
    actions: BucketActions,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum BucketActions {
    /// `set_field:IP->reg3,set_field:PORT->reg4,resubmit(,TABLE)`.
    Endpoint4 { ip: u32, port: u32, table: u8 },
    /// `set_field:W0->reg12,…,set_field:W3->reg15,set_field:PORT->reg4,resubmit(,TABLE)`.
    Endpoint6 { ip: [u32; 4], port: u32, table: u8 },
    /// Anything else, as it is.
    Other(Box<[Action]>),
}

impl Bucket {
    /// A service's bucket: load endpoint `ip` into its family's registers (`reg3`, or
    /// `reg12`..`reg15` most significant first, for IPv6) and `port` into `reg4`, then
    /// resubmit to `table`. The same as [`Bucket::new`] with those actions, without building
    /// them.
    pub fn endpoint(weight: u16, ip: std::net::IpAddr, port: u16, table: u8) -> Self {
        let port = u32::from(port);
        let actions = match ip {
            std::net::IpAddr::V4(v4) => BucketActions::Endpoint4 {
                ip: u32::from(v4),
                port,
                table,
            },
            std::net::IpAddr::V6(v6) => BucketActions::Endpoint6 {
                ip: ipv6_words(v6),
                port,
                table,
            },
        };
        Bucket { weight, actions }
    }

    /// A bucket of `weight` with `actions`.
    pub fn new(weight: u16, actions: Vec<Action>) -> Self {
        let compact = endpoint_bucket(&actions);
        Bucket {
            weight,
            actions: compact.unwrap_or_else(|| BucketActions::Other(actions.into_boxed_slice())),
        }
    }

    /// Its actions.
    pub fn actions(&self) -> std::borrow::Cow<'_, [Action]> {
        use std::borrow::Cow;
        let set = |reg: openflow::Field, v: u32| {
            Action::SetField(openflow::OxmField::exact(reg, u128::from(v)))
        };
        let resubmit = |table: u8| {
            Action::Resubmit(openflow::action::Resubmit {
                in_port: openflow::action::OFPP_IN_PORT16,
                table,
                ct: false,
                legacy: false,
            })
        };
        match &self.actions {
            BucketActions::Other(actions) => Cow::Borrowed(actions),
            BucketActions::Endpoint4 { ip, port, table } => Cow::Owned(vec![
                set(reg::ENDPOINT_IP, *ip),
                set(reg::ENDPOINT_PORT, *port),
                resubmit(*table),
            ]),
            BucketActions::Endpoint6 { ip, port, table } => {
                let mut actions: Vec<Action> = reg::ENDPOINT_IP6
                    .iter()
                    .zip(ip)
                    .map(|(f, w)| set(f.reg, *w))
                    .collect();
                actions.extend([set(reg::ENDPOINT_PORT, *port), resubmit(*table)]);
                Cow::Owned(actions)
            }
        }
    }
}

/// An IPv6 address as four 32-bit words, most significant first: how it fills `reg12`..`reg15`.
pub(crate) fn ipv6_words(ip: std::net::Ipv6Addr) -> [u32; 4] {
    let b = u128::from(ip);
    [
        (b >> 96) as u32,
        (b >> 64) as u32,
        (b >> 32) as u32,
        b as u32,
    ]
}

/// The compact form of a service's bucket, if `actions` is one.
fn endpoint_bucket(actions: &[Action]) -> Option<BucketActions> {
    let reg_value = |a: &Action, reg: openflow::Field| match a {
        Action::SetField(f) if f.field == reg && f.mask.is_none() => u32::try_from(f.value).ok(),
        _ => None,
    };
    let table = |a: &Action| match a {
        Action::Resubmit(r)
            if r.in_port == openflow::action::OFPP_IN_PORT16 && !r.ct && !r.legacy =>
        {
            Some(r.table)
        }
        _ => None,
    };
    match actions {
        [ip, port, next] => Some(BucketActions::Endpoint4 {
            ip: reg_value(ip, reg::ENDPOINT_IP)?,
            port: reg_value(port, reg::ENDPOINT_PORT)?,
            table: table(next)?,
        }),
        [w0, w1, w2, w3, port, next] => {
            let words = [w0, w1, w2, w3];
            let mut ip = [0u32; 4];
            for ((slot, a), f) in ip.iter_mut().zip(words).zip(reg::ENDPOINT_IP6) {
                *slot = reg_value(a, f.reg)?;
            }
            Some(BucketActions::Endpoint6 {
                ip,
                port: reg_value(port, reg::ENDPOINT_PORT)?,
                table: table(next)?,
            })
        }
        _ => None,
    }
}

/// A group as svcflow wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEntry {
    /// Type.
    pub kind: GroupKind,
    /// Buckets, in order.
    pub buckets: Vec<Bucket>,
}

impl GroupRefs for GroupEntry {
    fn group_refs(&self) -> Vec<u32> {
        self.buckets
            .iter()
            .flat_map(|b| match &b.actions {
                // A service's bucket names no group.
                BucketActions::Endpoint4 { .. } | BucketActions::Endpoint6 { .. } => {
                    action_group_refs(&[])
                }
                BucketActions::Other(actions) => action_group_refs(actions),
            })
            .collect()
    }
}

/// A flow printed as one line of `ovs-ofctl dump-flows --no-stats`.
pub struct DumpFlow<'a>(pub &'a FlowKey, pub &'a FlowEntry);

impl fmt::Display for DumpFlow<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let DumpFlow(key, entry) = self;
        f.write_str(" ")?;
        if entry.cookie != 0 {
            write!(f, "cookie={:#x}, ", entry.cookie)?;
        }
        if key.table != 0 {
            write!(f, "table={}, ", key.table)?;
        }
        let matches = format_match(&key.matches(), Some(key.priority));
        write!(
            f,
            "{matches} actions={}",
            DisplayInstructions(&entry.instructions())
        )
    }
}

/// A group printed as one line of `ovs-ofctl -O OpenFlow13 dump-groups`.
pub struct DumpGroup<'a>(pub u32, pub &'a GroupEntry);

impl fmt::Display for DumpGroup<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let DumpGroup(id, group) = self;
        let kind = match group.kind {
            GroupKind::All => "all",
            GroupKind::Select => "select",
        };
        write!(f, " group_id={id},type={kind}")?;
        for bucket in &group.buckets {
            f.write_str(",bucket=")?;
            // `ofputil_bucket_format()` prints the weight only when it is not 1.
            if group.kind == GroupKind::Select && bucket.weight != 1 {
                write!(f, "weight:{},", bucket.weight)?;
            }
            write!(
                f,
                "actions={}",
                openflow::action::format_actions(&bucket.actions())
            )?;
        }
        Ok(())
    }
}

/// A plan step as one line of an `ovs-ofctl bundle` file, so a plan can be read, or applied
/// by hand, with the tools users already know.
pub struct OfctlStep<'a>(pub &'a crate::plan::Step<FlowKey, FlowEntry, GroupEntry>);

impl fmt::Display for OfctlStep<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::plan::Step;
        match self.0 {
            Step::AddGroup(id, g) => write!(f, "group add{}", DumpGroup(*id, g)),
            Step::ModifyGroup(id, g) => write!(f, "group modify{}", DumpGroup(*id, g)),
            Step::DeleteGroup(id) => write!(f, "group delete group_id={id}"),
            Step::AddFlow(k, v) => write!(f, "flow add{}", DumpFlow(k, v)),
            Step::ModifyFlow(k, v) => write!(f, "flow modify_strict{}", DumpFlow(k, v)),
            // What goes on the wire: an add, which replaces the flow of the same key.
            Step::ReplaceFlow(k, v) => write!(f, "flow add{}", DumpFlow(k, v)),
            Step::DeleteFlow(k) => {
                let matches = format_match(&k.matches(), Some(k.priority));
                write!(f, "flow delete_strict table={},{matches}", k.table)
            }
        }
    }
}

#[cfg(test)]
mod bucket_tests {
    use super::*;
    use openflow::action::{OFPP_IN_PORT16, Resubmit};
    use openflow::{Field, OxmField};

    fn set(field: Field, v: u128) -> Action {
        Action::SetField(OxmField::exact(field, v))
    }

    fn resubmit(table: u8, ct: bool) -> Action {
        Action::Resubmit(Resubmit {
            in_port: OFPP_IN_PORT16,
            table,
            ct,
            legacy: false,
        })
    }

    #[test]
    fn service_buckets_are_kept_compact_and_give_back_their_actions() {
        let v4 = vec![
            set(Field::Reg3, 0x0af4_000b),
            set(Field::Reg4, 8080),
            resubmit(41, false),
        ];
        let v6 = vec![
            set(Field::Reg12, 0xfd00_0010),
            set(Field::Reg13, 0x0244_0000),
            set(Field::Reg14, 0),
            set(Field::Reg15, 0x11),
            set(Field::Reg4, 8080),
            resubmit(44, false),
        ];
        for actions in [v4, v6] {
            let b = Bucket::new(1, actions.clone());
            assert!(!matches!(b.actions, BucketActions::Other(_)), "{actions:?}");
            assert_eq!(b.actions().as_ref(), actions.as_slice());
            assert_eq!(b, Bucket::new(1, actions.clone()));
            assert!(std::mem::size_of::<Bucket>() <= 40);
        }
    }

    #[test]
    fn anything_else_is_kept_as_it_is() {
        let near_misses = [
            // A masked load, a resubmit with ct, the registers in another order, a group.
            vec![
                Action::SetField(OxmField::masked(Field::Reg3, 1u32, 0xffu32)),
                set(Field::Reg4, 80),
                resubmit(41, false),
            ],
            vec![
                set(Field::Reg3, 1),
                set(Field::Reg4, 80),
                resubmit(41, true),
            ],
            vec![
                set(Field::Reg4, 80),
                set(Field::Reg3, 1),
                resubmit(41, false),
            ],
            vec![Action::Group(7)],
            vec![],
        ];
        for actions in near_misses {
            let b = Bucket::new(2, actions.clone());
            assert!(matches!(b.actions, BucketActions::Other(_)), "{actions:?}");
            assert_eq!(b.actions().as_ref(), actions.as_slice());
        }
        let g = GroupEntry {
            kind: GroupKind::All,
            buckets: vec![Bucket::new(0, vec![Action::Group(7)])],
        };
        assert_eq!(g.group_refs(), [7]);
    }
}
