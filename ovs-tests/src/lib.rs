//! A private, real Open vSwitch for tests, with network namespaces as hosts.
//!
//! A [`Sandbox`] is one node: its own `ovsdb-server` (in the test's network namespace, reached
//! over a unix socket in the sandbox's temp dir, and optionally over `ptcp` on loopback) and its
//! own `ovs-vswitchd` with the userspace datapath, running inside a network namespace of its own
//! (the node's host stack). Bridges, their tap devices, and the host ends of the veth pairs all
//! live in that node namespace, so sandboxes never touch the machine's own links and can run in
//! parallel. Each [`Host`] is a further namespace whose `eth0` is attached to a bridge.
//!
//! Everything is torn down on drop, including during a panic. A sandbox left behind by a test
//! process that was killed is reaped by the next [`Sandbox::start`].
//!
//! [`scenario_node`] is the pipeline tests' controller: a golden scenario's node driven by
//! svcflow's engine, its switch checked against netvirt's render.
//!
//! See `shared/notes/ovs-userspace.md` for why each setting is needed.

pub mod bench;
mod cmd;
mod error;
pub mod fuzz;
mod host;
pub mod http;
pub mod kube;
pub mod lab;
mod netns;
pub mod pki;
pub mod raft;
pub mod recipe;
mod sandbox;
pub mod scenario_node;
pub mod svcflow;

pub use cmd::{free_port, wait_for, wait_stable};
pub use error::SandboxError;
pub use host::{Attempt, Host, HostSpec, ProbeStream, Process, Sample, probe_binary, tally};
pub use netns::{NETNS_PREFIX, leftover_namespaces};
pub use sandbox::{Sandbox, SandboxOptions};

/// Removes what sandboxes and labs whose owning process is gone left behind (their
/// namespaces and the processes in them, their `ovsdb-server`s and directories), as every
/// [`Sandbox::start`] does first. For scripts whose program may be killed midway.
pub fn reap_dead_sandboxes() {
    netns::reap_dead_sandboxes(&std::env::temp_dir());
}
