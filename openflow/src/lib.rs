//! OpenFlow 1.3 codec with the Open vSwitch (Nicira and ONF) extensions, and the switch session.
//!
//! Byte-exact with Open vSwitch 3.1; every type's `Display` prints what
//! `ovs-ofctl` 3.1 prints. The codec and [`session`] are pure (no I/O, no logging, no
//! clock); [`driver`] runs sessions on tokio.
//!
//! - [`wire`]: checked [`wire::Reader`] and length-reserving [`wire::Writer`].
//! - [`field`], [`oxm`]: match fields and [`oxm::Match`].
//! - [`action`], [`ct`], [`learn`], [`instruction`]: actions and instructions.
//! - [`msg`]: [`msg::Message`] and every message body.
//! - [`match_fmt`], [`packet_fmt`], [`text`]: `ovs-ofctl` text.
//! - [`session`]: the sans-IO switch session; [`driver`]: its tokio driver.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use openflow::action::Action;
//! use openflow::ct::{Ct, CtZone, Nat};
//! use openflow::instruction::Instruction;
//! use openflow::msg::FlowMod;
//! use openflow::{Body, Field, Match, Message};
//!
//! let fm = FlowMod {
//!     priority: 100,
//!     match_: Match::new()
//!         .with(Field::EthType, 0x0800u16)
//!         .with(Field::IpProto, 6u8)
//!         .with(Field::Ipv4Dst, u32::from(Ipv4Addr::new(10, 96, 0, 10)))
//!         .with(Field::TcpDst, 80u16),
//!     instructions: vec![Instruction::ApplyActions(vec![Action::Ct(Ct {
//!         commit: true,
//!         zone: CtZone::Imm(5),
//!         nat: Some(Nat::dnat(Ipv4Addr::new(10, 244, 1, 5), Some(8080))),
//!         ..Ct::default()
//!     })])]
//!     .into(),
//!     ..FlowMod::default()
//! };
//! let msg = Message::new(7, Body::FlowMod(fm));
//! let bytes = msg.encode().unwrap();
//! assert_eq!(Message::decode(&bytes).unwrap(), msg);
//! assert_eq!(
//!     msg.to_string(),
//!     "OFPT_FLOW_MOD (OF1.3) (xid=0x7): ADD priority=100,tcp,nw_dst=10.96.0.10,tp_dst=80 \
//!      actions=ct(commit,zone=5,nat(dst=10.244.1.5:8080))"
//! );
//! ```

pub mod action;
pub mod ct;
pub mod driver;
pub mod error;
pub mod field;
pub mod instruction;
pub mod learn;
pub mod match_fmt;
pub mod msg;
pub mod oxm;
pub mod packet_fmt;
pub mod session;
pub mod subfield;
#[cfg(test)]
mod test_util;
pub mod text;
pub mod wire;

pub use action::Action;
pub use error::{DecodeError, EncodeError};
pub use field::Field;
pub use instruction::{Instruction, Instructions};
pub use msg::{Body, Message};
pub use oxm::{Match, OxmField, RawOxm};

#[cfg(test)]
mod size_tests {
    /// Guards decode speed: large values are moved through `Result`s.
    #[test]
    fn value_sizes_stay_small() {
        assert!(size_of::<crate::Action>() <= 96);
        assert!(size_of::<crate::OxmField>() <= 64);
        assert!(size_of::<crate::DecodeError>() <= 32);
    }
}
