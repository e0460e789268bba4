//! `OFPT_FLOW_MOD` (OF1.3 §7.3.4.1) and `OFPT_FLOW_REMOVED` (OF1.3 §7.4.2).

use std::fmt::{self, Write as _};

use crate::error::DecodeError;
use crate::instruction::{Instructions, decode_instructions};
use crate::match_fmt::format_match;
use crate::oxm::Match;
use crate::text;
use crate::wire::{Fixed, Reader, Writer};

/// `enum ofp_flow_mod_command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowModCommand {
    /// `OFPFC_ADD`.
    Add,
    /// `OFPFC_MODIFY`.
    Modify,
    /// `OFPFC_MODIFY_STRICT`.
    ModifyStrict,
    /// `OFPFC_DELETE`.
    Delete,
    /// `OFPFC_DELETE_STRICT`.
    DeleteStrict,
    /// Any other value.
    Unknown(u8),
}

impl From<u8> for FlowModCommand {
    fn from(v: u8) -> Self {
        match v {
            0 => FlowModCommand::Add,
            1 => FlowModCommand::Modify,
            2 => FlowModCommand::ModifyStrict,
            3 => FlowModCommand::Delete,
            4 => FlowModCommand::DeleteStrict,
            v => FlowModCommand::Unknown(v),
        }
    }
}

impl From<FlowModCommand> for u8 {
    fn from(c: FlowModCommand) -> u8 {
        match c {
            FlowModCommand::Add => 0,
            FlowModCommand::Modify => 1,
            FlowModCommand::ModifyStrict => 2,
            FlowModCommand::Delete => 3,
            FlowModCommand::DeleteStrict => 4,
            FlowModCommand::Unknown(v) => v,
        }
    }
}

/// `OFPFF_SEND_FLOW_REM`.
pub const OFPFF_SEND_FLOW_REM: u16 = 1;
/// `OFPFF_CHECK_OVERLAP`.
pub const OFPFF_CHECK_OVERLAP: u16 = 2;
/// `OFPFF_RESET_COUNTS`.
pub const OFPFF_RESET_COUNTS: u16 = 4;
/// `OFPFF_NO_PKT_COUNTS`.
pub const OFPFF_NO_PKT_COUNTS: u16 = 8;
/// `OFPFF_NO_BYT_COUNTS`.
pub const OFPFF_NO_BYT_COUNTS: u16 = 16;

/// `OFPT_FLOW_MOD` (`struct ofp_flow_mod`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowMod {
    /// Cookie (new cookie for ADD).
    pub cookie: u64,
    /// Cookie mask for MODIFY/DELETE.
    pub cookie_mask: u64,
    /// Table.
    pub table_id: u8,
    /// Command.
    pub command: FlowModCommand,
    /// Idle timeout (0 = none).
    pub idle_timeout: u16,
    /// Hard timeout (0 = none).
    pub hard_timeout: u16,
    /// Priority.
    pub priority: u16,
    /// Buffered packet to apply to, `u32::MAX` for none.
    pub buffer_id: u32,
    /// DELETE filter on output port, `OFPP_ANY` for none.
    pub out_port: u32,
    /// DELETE filter on output group, `OFPG_ANY` for none.
    pub out_group: u32,
    /// `OFPFF_*` flags.
    pub flags: u16,
    /// Match.
    pub match_: Match,
    /// Instructions.
    pub instructions: Instructions,
}

impl Default for FlowMod {
    fn default() -> Self {
        FlowMod {
            cookie: 0,
            cookie_mask: 0,
            table_id: 0,
            command: FlowModCommand::Add,
            idle_timeout: 0,
            hard_timeout: 0,
            priority: 0x8000,
            buffer_id: u32::MAX,
            out_port: u32::MAX,
            out_group: u32::MAX,
            flags: 0,
            match_: Match::new(),
            instructions: Instructions::default(),
        }
    }
}

impl FlowMod {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u64(self.cookie);
        w.u64(self.cookie_mask);
        w.u8(self.table_id);
        w.u8(self.command.into());
        w.u16(self.idle_timeout);
        w.u16(self.hard_timeout);
        w.u16(self.priority);
        w.u32(self.buffer_id);
        w.u32(self.out_port);
        w.u32(self.out_group);
        w.u16(self.flags);
        w.zeros(2);
        self.match_.write(w);
        self.instructions.encode(w);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        // The fixed part of `struct ofp_flow_mod`, with one bounds check.
        let h = Fixed(r.array::<40>()?);
        if h.u16(38) != 0 {
            return Err(DecodeError::BadPadding("ofp_flow_mod"));
        }
        let match_ = Match::decode(r)?;
        let instructions = Instructions::List(decode_instructions(r)?);
        Ok(FlowMod {
            cookie: h.u64(0),
            cookie_mask: h.u64(8),
            table_id: h.u8(16),
            command: h.u8(17).into(),
            idle_timeout: h.u16(18),
            hard_timeout: h.u16(20),
            priority: h.u16(22),
            buffer_id: h.u32(24),
            out_port: h.u32(28),
            out_group: h.u32(32),
            flags: h.u16(36),
            match_,
            instructions,
        })
    }
}

/// `ofputil_flow_mod_flags_format()`.
fn flags_text(flags: u16) -> String {
    let mut s = String::new();
    for (bit, name) in [
        (OFPFF_SEND_FLOW_REM, "send_flow_rem "),
        (OFPFF_CHECK_OVERLAP, "check_overlap "),
        (OFPFF_RESET_COUNTS, "reset_counts "),
        (OFPFF_NO_PKT_COUNTS, "no_packet_counts "),
        (OFPFF_NO_BYT_COUNTS, "no_byte_counts "),
    ] {
        if flags & bit != 0 {
            s.push_str(name);
        }
    }
    s
}

impl fmt::Display for FlowMod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::from(" ");
        match self.command {
            FlowModCommand::Add => s.push_str("ADD"),
            FlowModCommand::Modify => s.push_str("MOD"),
            FlowModCommand::ModifyStrict => s.push_str("MOD_STRICT"),
            FlowModCommand::Delete => s.push_str("DEL"),
            FlowModCommand::DeleteStrict => s.push_str("DEL_STRICT"),
            FlowModCommand::Unknown(c) => {
                let _ = write!(s, "cmd:{c}");
            }
        }
        if self.table_id != 0 {
            let _ = write!(s, " table:{}", self.table_id);
        }
        s.push(' ');
        s.push_str(&format_match(&self.match_, Some(self.priority)));
        if !s.ends_with(' ') {
            s.push(' ');
        }
        let is_add = self.command == FlowModCommand::Add;
        if is_add && self.cookie != 0 && self.cookie != u64::MAX {
            let _ = write!(s, "cookie:{:#x} ", self.cookie);
        }
        if !is_add && self.cookie_mask != 0 {
            let _ = write!(s, "cookie:{:#x}/{:#x} ", self.cookie, self.cookie_mask);
        }
        if self.idle_timeout != 0 {
            let _ = write!(s, "idle:{} ", self.idle_timeout);
        }
        if self.hard_timeout != 0 {
            let _ = write!(s, "hard:{} ", self.hard_timeout);
        }
        if self.priority != 0x8000 && !s.contains("priority") {
            let _ = write!(s, "pri:{} ", self.priority);
        }
        if self.buffer_id != u32::MAX {
            let _ = write!(s, "buf:{:#x} ", self.buffer_id);
        }
        if self.out_port != u32::MAX {
            let _ = write!(s, "out_port:{} ", text::port32(self.out_port));
        }
        s.push_str(&flags_text(self.flags));
        s.push_str("actions=");
        s.push_str(&self.instructions.format());
        f.write_str(&s)
    }
}

/// `OFPT_FLOW_REMOVED` (`struct ofp_flow_removed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRemoved {
    /// Cookie.
    pub cookie: u64,
    /// Priority.
    pub priority: u16,
    /// `OFPRR_*` reason.
    pub reason: u8,
    /// Table.
    pub table_id: u8,
    /// Seconds alive.
    pub duration_sec: u32,
    /// Nanoseconds beyond `duration_sec`.
    pub duration_nsec: u32,
    /// Idle timeout.
    pub idle_timeout: u16,
    /// Hard timeout.
    pub hard_timeout: u16,
    /// Packets.
    pub packet_count: u64,
    /// Bytes.
    pub byte_count: u64,
    /// Match.
    pub match_: Match,
}

impl FlowRemoved {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u64(self.cookie);
        w.u16(self.priority);
        w.u8(self.reason);
        w.u8(self.table_id);
        w.u32(self.duration_sec);
        w.u32(self.duration_nsec);
        w.u16(self.idle_timeout);
        w.u16(self.hard_timeout);
        w.u64(self.packet_count);
        w.u64(self.byte_count);
        self.match_.write(w);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(FlowRemoved {
            cookie: r.u64()?,
            priority: r.u16()?,
            reason: r.u8()?,
            table_id: r.u8()?,
            duration_sec: r.u32()?,
            duration_nsec: r.u32()?,
            idle_timeout: r.u16()?,
            hard_timeout: r.u16()?,
            packet_count: r.u64()?,
            byte_count: r.u64()?,
            match_: Match::decode(r)?,
        })
    }
}

/// `ofp_print_duration()`.
pub(crate) fn duration(sec: u32, nsec: u32) -> String {
    let mut s = sec.to_string();
    if nsec > 0 {
        let msec = nsec / 1_000_000;
        if msec * 1_000_000 == nsec {
            let _ = write!(s, ".{msec:03}");
        } else {
            let frac = format!("{nsec:09}");
            let _ = write!(s, ".{}", frac.trim_end_matches('0'));
        }
    }
    s.push('s');
    s
}

impl fmt::Display for FlowRemoved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reason = match self.reason {
            0 => "idle".to_string(),
            1 => "hard".to_string(),
            2 => "delete".to_string(),
            3 => "group_delete".to_string(),
            4 => "meter_delete".to_string(),
            5 => "eviction".to_string(),
            r => r.to_string(),
        };
        write!(
            f,
            " {} reason={reason}",
            format_match(&self.match_, Some(self.priority))
        )?;
        if self.table_id != 255 {
            write!(f, " table_id={}", self.table_id)?;
        }
        if self.cookie != 0 {
            write!(f, " cookie:{:#x}", self.cookie)?;
        }
        write!(
            f,
            " duration{} idle{}",
            duration(self.duration_sec, self.duration_nsec),
            self.idle_timeout
        )?;
        if self.hard_timeout != 0 {
            write!(f, " hard{}", self.hard_timeout)?;
        }
        write!(f, " pkts{} bytes{}", self.packet_count, self.byte_count)
    }
}
