//! `OFPT_GROUP_MOD` (OF1.3 §7.3.4.2) and buckets (`struct ofp_bucket`).

use std::fmt::{self, Write as _};

use crate::action::{Action, encode_actions, format_actions};
use crate::error::DecodeError;
use crate::text;
use crate::wire::{Reader, Writer};

/// `enum ofp_group_mod_command`, plus OVS's `OFPGC_ADD_OR_MOD` (0x8000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupModCommand {
    /// `OFPGC_ADD`.
    Add,
    /// `OFPGC_MODIFY`.
    Modify,
    /// `OFPGC_DELETE`.
    Delete,
    /// OVS extension `OFPGC_ADD_OR_MOD`.
    AddOrMod,
    /// Any other value.
    Unknown(u16),
}

impl From<u16> for GroupModCommand {
    fn from(v: u16) -> Self {
        match v {
            0 => GroupModCommand::Add,
            1 => GroupModCommand::Modify,
            2 => GroupModCommand::Delete,
            0x8000 => GroupModCommand::AddOrMod,
            v => GroupModCommand::Unknown(v),
        }
    }
}

impl From<GroupModCommand> for u16 {
    fn from(c: GroupModCommand) -> u16 {
        match c {
            GroupModCommand::Add => 0,
            GroupModCommand::Modify => 1,
            GroupModCommand::Delete => 2,
            GroupModCommand::AddOrMod => 0x8000,
            GroupModCommand::Unknown(v) => v,
        }
    }
}

/// `enum ofp_group_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupType {
    /// `OFPGT_ALL`.
    All,
    /// `OFPGT_SELECT`.
    Select,
    /// `OFPGT_INDIRECT`.
    Indirect,
    /// `OFPGT_FF`.
    FastFailover,
    /// Any other value.
    Unknown(u8),
}

impl From<u8> for GroupType {
    fn from(v: u8) -> Self {
        match v {
            0 => GroupType::All,
            1 => GroupType::Select,
            2 => GroupType::Indirect,
            3 => GroupType::FastFailover,
            v => GroupType::Unknown(v),
        }
    }
}

impl From<GroupType> for u8 {
    fn from(t: GroupType) -> u8 {
        match t {
            GroupType::All => 0,
            GroupType::Select => 1,
            GroupType::Indirect => 2,
            GroupType::FastFailover => 3,
            GroupType::Unknown(v) => v,
        }
    }
}

impl GroupType {
    fn name(self) -> &'static str {
        match self {
            GroupType::All => "all",
            GroupType::Select => "select",
            GroupType::Indirect => "indirect",
            GroupType::FastFailover => "ff",
            GroupType::Unknown(_) => "unknown",
        }
    }
}

/// One bucket (`struct ofp_bucket`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Bucket {
    /// Relative weight (select groups).
    pub weight: u16,
    /// Port whose liveness gates the bucket (fast failover), `OFPP_ANY` for none.
    pub watch_port: u32,
    /// Group whose liveness gates the bucket, `OFPG_ANY` for none.
    pub watch_group: u32,
    /// Actions.
    pub actions: Vec<Action>,
}

impl Bucket {
    /// A bucket with no watch and the given weight.
    pub fn new(weight: u16, actions: Vec<Action>) -> Self {
        Bucket {
            weight,
            watch_port: u32::MAX,
            watch_group: u32::MAX,
            actions,
        }
    }

    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        16 + self.actions.iter().map(Action::encoded_len).sum::<usize>()
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        let start = w.len();
        let len = w.place_u16();
        w.u16(self.weight);
        w.u32(self.watch_port);
        w.u32(self.watch_group);
        w.zeros(4);
        encode_actions(&self.actions, w);
        w.fill_len(len, start);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let len = usize::from(r.u16()?);
        if len < 16 || len % 8 != 0 {
            return Err(DecodeError::BadLength {
                what: "ofp_bucket",
                len,
            });
        }
        let mut b = r.sub(len - 2)?;
        let weight = b.u16()?;
        let watch_port = b.u32()?;
        let watch_group = b.u32()?;
        b.pad(4, "ofp_bucket")?;
        Ok(Bucket {
            weight,
            watch_port,
            watch_group,
            actions: Action::decode_list(&mut b)?,
        })
    }

    pub(crate) fn format(&self, ty: GroupType) -> String {
        let mut s = String::from("bucket=");
        let default_weight = if ty == GroupType::Select { 1 } else { 0 };
        if self.weight != default_weight {
            let _ = write!(s, "weight:{},", self.weight);
        }
        if self.watch_port != u32::MAX {
            let _ = write!(s, "watch_port:{},", text::port32(self.watch_port));
        }
        if self.watch_group != u32::MAX {
            let _ = write!(s, "watch_group:{},", self.watch_group);
        }
        s.push_str("actions=");
        s.push_str(&format_actions(&self.actions));
        s
    }
}

/// `ofp_print_group()`: `group_id=N,type=T,bucket=...`.
pub(crate) fn format_group(group_id: u32, ty: GroupType, buckets: &[Bucket]) -> String {
    let mut s = format!("group_id={group_id},type={}", ty.name());
    for b in buckets {
        s.push(',');
        s.push_str(&b.format(ty));
    }
    s
}

/// `OFPT_GROUP_MOD` (`struct ofp_group_mod`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupMod {
    /// Command.
    pub command: GroupModCommand,
    /// Group type.
    pub group_type: GroupType,
    /// Group id.
    pub group_id: u32,
    /// Buckets.
    pub buckets: Vec<Bucket>,
}

impl GroupMod {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u16(self.command.into());
        w.u8(self.group_type.into());
        w.u8(0);
        w.u32(self.group_id);
        for b in &self.buckets {
            b.encode(w);
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let command = r.u16()?.into();
        let group_type = r.u8()?.into();
        r.pad(1, "ofp_group_mod")?;
        let group_id = r.u32()?;
        let mut buckets = Vec::new();
        while !r.is_empty() {
            buckets.push(Bucket::decode(r)?);
        }
        Ok(GroupMod {
            command,
            group_type,
            group_id,
            buckets,
        })
    }
}

impl fmt::Display for GroupMod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cmd = match self.command {
            GroupModCommand::Add => "ADD".to_string(),
            GroupModCommand::Modify => "MOD".to_string(),
            GroupModCommand::Delete => "DEL".to_string(),
            GroupModCommand::AddOrMod => "ADD_OR_MOD".to_string(),
            GroupModCommand::Unknown(c) => format!("cmd:{c}"),
        };
        write!(
            f,
            "\n {cmd} {}",
            format_group(self.group_id, self.group_type, &self.buckets)
        )
    }
}
