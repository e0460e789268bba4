//! `OFPT_PACKET_IN` (OF1.3 §7.4.1) and `OFPT_PACKET_OUT` (OF1.3 §7.3.7).

use std::fmt;

use crate::action::{Action, encode_actions, format_actions, packet_in_reason};
use crate::error::DecodeError;
use crate::match_fmt::format_match;
use crate::oxm::Match;
use crate::text;
use crate::wire::{Reader, Writer};

/// `OFPT_PACKET_IN` (`struct ofp_packet_in`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketIn {
    /// Buffer id, `u32::MAX` when unbuffered.
    pub buffer_id: u32,
    /// Full length of the frame.
    pub total_len: u16,
    /// `OFPR_*` reason.
    pub reason: u8,
    /// Table that was looked up.
    pub table_id: u8,
    /// Cookie of the flow that sent the packet.
    pub cookie: u64,
    /// Pipeline fields (in_port, metadata, registers...).
    pub match_: Match,
    /// Packet bytes.
    pub data: Vec<u8>,
}

impl PacketIn {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u32(self.buffer_id);
        w.u16(self.total_len);
        w.u8(self.reason);
        w.u8(self.table_id);
        w.u64(self.cookie);
        self.match_.write(w);
        w.zeros(2);
        w.bytes(&self.data);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let buffer_id = r.u32()?;
        let total_len = r.u16()?;
        let reason = r.u8()?;
        let table_id = r.u8()?;
        let cookie = r.u64()?;
        let match_ = Match::decode(r)?;
        r.pad(2, "ofp_packet_in")?;
        Ok(PacketIn {
            buffer_id,
            total_len,
            reason,
            table_id,
            cookie,
            match_,
            data: r.rest().to_vec(),
        })
    }
}

impl fmt::Display for PacketIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.table_id != 0 {
            write!(f, " table_id={}", self.table_id)?;
        }
        if self.cookie != u64::MAX {
            write!(f, " cookie={:#x}", self.cookie)?;
        }
        write!(f, " total_len={} ", self.total_len)?;
        let m = format_match(&self.match_, None);
        write!(
            f,
            "{m} (via {}) data_len={}",
            packet_in_reason(self.reason),
            self.data.len()
        )?;
        if self.buffer_id == u32::MAX {
            f.write_str(" (unbuffered)")?;
        } else {
            write!(f, " buffer=0x{:08x}", self.buffer_id)?;
        }
        if let Some(s) = crate::packet_fmt::packet_to_string(&self.data) {
            write!(f, "\n{s}")?;
        }
        Ok(())
    }
}

/// `OFPT_PACKET_OUT` (`struct ofp_packet_out`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketOut {
    /// Buffer id, `u32::MAX` when the packet is in `data`.
    pub buffer_id: u32,
    /// Input port for the packet.
    pub in_port: u32,
    /// Actions.
    pub actions: Vec<Action>,
    /// Packet bytes.
    pub data: Vec<u8>,
}

impl PacketOut {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u32(self.buffer_id);
        w.u32(self.in_port);
        let len = w.place_u16();
        w.zeros(6);
        let start = w.len();
        encode_actions(&self.actions, w);
        w.fill_len(len, start);
        w.bytes(&self.data);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let buffer_id = r.u32()?;
        let in_port = r.u32()?;
        let actions_len = usize::from(r.u16()?);
        r.pad(6, "ofp_packet_out")?;
        let mut a = r.sub(actions_len)?;
        let actions = Action::decode_list(&mut a)?;
        Ok(PacketOut {
            buffer_id,
            in_port,
            actions,
            data: r.rest().to_vec(),
        })
    }
}

impl fmt::Display for PacketOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            " in_port={} actions={}",
            text::port32(self.in_port),
            format_actions(&self.actions)
        )?;
        if self.buffer_id == u32::MAX {
            write!(f, " data_len={}", self.data.len())?;
            if let Some(s) = crate::packet_fmt::packet_to_string(&self.data) {
                write!(f, "\n{s}")?;
            }
            Ok(())
        } else {
            write!(f, " buffer=0x{:08x}", self.buffer_id)
        }
    }
}
