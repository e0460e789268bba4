//! Services to desired OpenFlow state: model, desired flows and groups, plan and apply.
//!
//! `model` is plain data fed by the inputs. Everything here is pure: no sockets, no clock.

pub mod config;
pub mod ids;
pub mod model;
pub mod plan;
pub mod reject;
pub mod resolve;
