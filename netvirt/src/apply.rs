//! Plan steps as OpenFlow messages, ready to go into a bundle, in plan order.

use openflow::msg::{
    Body, Bucket as WireBucket, FlowMod, FlowModCommand, GroupMod, GroupModCommand, GroupType,
};

use std::borrow::Borrow;

use crate::flow::{FlowEntry, FlowKey, GroupEntry, GroupKind};
use crate::plan::Step;

/// `OFPG_ANY`.
const OFPG_ANY: u32 = 0xffff_ffff;
/// `OFPP_ANY`.
const OFPP_ANY: u32 = 0xffff_ffff;

/// The message that carries out one step (of owned or borrowed entries).
pub fn message<K, F, G>(step: &Step<K, F, G>) -> Body
where
    K: Borrow<FlowKey>,
    F: Borrow<FlowEntry>,
    G: Borrow<GroupEntry>,
{
    match step {
        Step::AddGroup(id, g) => group_mod(GroupModCommand::Add, *id, Some(g.borrow())),
        Step::ModifyGroup(id, g) => group_mod(GroupModCommand::Modify, *id, Some(g.borrow())),
        Step::DeleteGroup(id) => group_mod(GroupModCommand::Delete, *id, None),
        Step::AddFlow(k, v) => flow_mod(FlowModCommand::Add, k.borrow(), Some(v.borrow())),
        // A modify keeps the cookie the switch has: the flows' cookies are the same.
        Step::ModifyFlow(k, v) => {
            flow_mod(FlowModCommand::ModifyStrict, k.borrow(), Some(v.borrow()))
        }
        // An add replaces the flow of the same key whole, with its new cookie.
        Step::ReplaceFlow(k, v) => flow_mod(FlowModCommand::Add, k.borrow(), Some(v.borrow())),
        Step::DeleteFlow(k) => flow_mod(FlowModCommand::DeleteStrict, k.borrow(), None),
    }
}

/// The messages of a whole plan, in order.
pub fn messages(steps: &[Step<FlowKey, FlowEntry, GroupEntry>]) -> Vec<Body> {
    steps.iter().map(message).collect()
}

/// A flow_mod for `key`, with `entry` for adds and modifies.
pub fn flow_mod(command: FlowModCommand, key: &FlowKey, entry: Option<&FlowEntry>) -> Body {
    Body::FlowMod(FlowMod {
        cookie: entry.map_or(0, |e| e.cookie),
        table_id: key.table,
        command,
        priority: key.priority,
        out_port: OFPP_ANY,
        out_group: OFPG_ANY,
        match_: key.matches(),
        instructions: entry.map(|e| e.instructions.to_wire()).unwrap_or_default(),
        ..FlowMod::default()
    })
}

/// A group_mod for group `id`, with `group` for adds and modifies.
pub fn group_mod(command: GroupModCommand, id: u32, group: Option<&GroupEntry>) -> Body {
    let (group_type, buckets) = match group {
        Some(g) => (
            wire_type(g.kind),
            g.buckets
                .iter()
                .map(|b| WireBucket::new(b.weight, b.actions().into_owned()))
                .collect(),
        ),
        None => (GroupType::All, Vec::new()),
    };
    Body::GroupMod(GroupMod {
        command,
        group_type,
        group_id: id,
        buckets,
    })
}

fn wire_type(kind: GroupKind) -> GroupType {
    match kind {
        GroupKind::All => GroupType::All,
        GroupKind::Select => GroupType::Select,
    }
}

/// A group read back from the switch (`OFPMP_GROUP_DESC`), or `None` for a type svcflow
/// never installs (the plan then replaces it).
pub fn group_from_wire(group_type: GroupType, buckets: &[WireBucket]) -> Option<GroupEntry> {
    let kind = match group_type {
        GroupType::All => GroupKind::All,
        GroupType::Select => GroupKind::Select,
        _ => return None,
    };
    let buckets = buckets
        .iter()
        .map(|b| crate::flow::Bucket::new(b.weight, b.actions.clone()))
        .collect();
    Some(GroupEntry { kind, buckets })
}
