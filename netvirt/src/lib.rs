//! Services to desired OpenFlow state: model, desired flows and groups, plan and apply.
//!
//! `model` is plain data fed by the inputs; `desired` and `plan` are pure functions. Nothing
//! here touches a socket or reads the clock.

pub mod agent;
pub mod apply;
pub mod chain;
pub mod config;
pub mod desired;
pub mod engine;
pub mod flow;
pub mod health;
pub mod ids;
pub mod model;
pub mod node_setup;
pub mod pipeline;
pub mod plan;
pub mod reject;
pub mod resolve;
pub mod scenario;
pub mod shards;
