//! Session settings: timers and bundle flags.

use std::time::Duration;

/// `OFPBF_ATOMIC` (ONF EXT-230, OF1.4 §7.3.9).
pub const OFPBF_ATOMIC: u16 = 1;
/// `OFPBF_ORDERED`.
pub const OFPBF_ORDERED: u16 = 2;

/// Timers and defaults of one switch session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Silence from the peer after which we send `OFPT_ECHO_REQUEST`. OVS probes after 5 s of
    /// inactivity (`ovs-vswitchd` `inactivity_probe`, default 5000 ms).
    pub echo_interval: Duration,
    /// Further silence, after the echo request, after which the peer is declared dead.
    pub echo_timeout: Duration,
    /// Time allowed for HELLO and FEATURES to complete.
    pub handshake_timeout: Duration,
    /// `OFPBF_*` flags of every bundle (ONF EXT-230); atomic and ordered by default.
    pub bundle_flags: u16,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            echo_interval: Duration::from_secs(5),
            echo_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            bundle_flags: OFPBF_ATOMIC | OFPBF_ORDERED,
        }
    }
}
