//! Flows and groups as svcflow wants them, keyed the way OpenFlow identifies them, and printed
//! exactly as `ovs-ofctl dump-flows --no-stats` and `dump-groups` print them.

use std::cmp::Ordering;
use std::fmt;

use openflow::instruction::{Instruction, Instructions};
use openflow::match_fmt::format_match;
use openflow::{Action, Match};

use crate::plan::GroupRefs;

/// What identifies a flow in a table: table, priority and match.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Table id.
    pub table: u8,
    /// Priority.
    pub priority: u16,
    /// Match, with fields in OVS's canonical order.
    pub matches: Match,
}

impl Ord for FlowKey {
    /// By table, then priority (highest first), then the match's fields in order; compares
    /// in place, allocating nothing (it runs on every map lookup of a flow).
    fn cmp(&self, other: &Self) -> Ordering {
        self.table
            .cmp(&other.table)
            .then_with(|| other.priority.cmp(&self.priority))
            .then_with(|| {
                let key = |f: &openflow::oxm::OxmField| (f.field, f.value, f.mask);
                self.matches
                    .fields
                    .iter()
                    .map(key)
                    .cmp(other.matches.fields.iter().map(key))
            })
    }
}

impl PartialOrd for FlowKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What a flow does, and its cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEntry {
    /// Cookie; see [`crate::pipeline::cookie`].
    pub cookie: u64,
    /// Instructions.
    pub instructions: Vec<Instruction>,
}

impl GroupRefs for FlowEntry {
    fn group_refs(&self) -> Vec<u32> {
        let mut refs = Vec::new();
        for instruction in &self.instructions {
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Weight (select groups); 0 for `all` groups.
    pub weight: u16,
    /// Actions.
    pub actions: Vec<Action>,
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
            .flat_map(|b| action_group_refs(&b.actions))
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
        let matches = format_match(&key.matches, Some(key.priority));
        write!(f, "{matches} actions={}", Instructions(&entry.instructions))
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
                openflow::action::format_actions(&bucket.actions)
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
            Step::DeleteFlow(k) => {
                let matches = format_match(&k.matches, Some(k.priority));
                write!(f, "flow delete_strict table={},{matches}", k.table)
            }
        }
    }
}
