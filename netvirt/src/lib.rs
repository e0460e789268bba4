//! Services to desired OpenFlow state: model, desired flows and groups, plan and apply.
//!
//! Pure (no socket, no clock, deterministic): `model` (plain data fed by the inputs),
//! `desired` (the render: one node's flows and groups, straight through, one file per
//! concern), `shards` (the same state kept incrementally per owner, built on `desired`, and
//! the renders and group ids nodes share), `family` (IPv4 and IPv6 and their fields), `resolve`, `chain`, `ids`, `plan`, `apply` (steps as OpenFlow
//! messages), `flow`, `packed` (a flow's match and instructions in compact form), `pipeline`, `reject`, `health_answer` (health-check probes answered for every node), `trace` (a live trace's probe, temporary flows and
//! report), `health`, `node_setup` (what a node must hold, as OVSDB operations and host
//! commands, computed, not run), `config` and `scenario`.
//!
//! I/O, through an [`openflow::driver::SwitchHandle`] the caller owns: `engine` (sends a
//! node's steps and reads its switch back after a connect), `agent` (`read_state`, and
//! `serve_packet_ins`, which answers the refusal and health-check packet-ins) and `meter` (the refusal meter,
//! which the engine installs before any flow that uses it). Neither opens a socket or reads the
//! clock itself; the daemon's tasks drive them.

pub mod agent;
pub mod apply;
pub mod chain;
pub mod config;
pub mod desired;
pub mod engine;
pub mod family;
pub mod flow;
pub mod health;
pub mod health_answer;
pub mod ids;
pub mod meter;
pub mod model;
pub mod node_setup;
pub mod packed;
pub mod pipeline;
pub mod plan;
pub mod reject;
pub mod resolve;
pub mod scenario;
pub mod shards;
pub mod trace;
