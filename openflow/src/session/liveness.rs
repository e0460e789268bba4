//! Dead-peer detection with echo requests (OF1.3 §6.3.2 "Echo Request"), like OVS's
//! `rconn` inactivity probe: after `interval` of silence send one echo request; after a further
//! `timeout` of silence give up.

use std::time::{Duration, Instant};

/// What the timer wants done now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// Nothing yet.
    Nothing,
    /// Send an echo request.
    SendEcho,
    /// The peer has been silent for this long despite an echo request.
    Dead(Duration),
}

/// The echo timer of one session.
#[derive(Debug)]
pub(crate) struct Liveness {
    interval: Duration,
    timeout: Duration,
    last_rx: Instant,
    /// When we sent an echo request in the current silence, if we did.
    probed_at: Option<Instant>,
}

impl Liveness {
    pub(crate) fn new(interval: Duration, timeout: Duration, now: Instant) -> Self {
        Liveness {
            interval,
            timeout,
            last_rx: now,
            probed_at: None,
        }
    }

    /// Anything received proves the peer alive.
    pub(crate) fn on_rx(&mut self, now: Instant) {
        self.last_rx = now;
        self.probed_at = None;
    }

    /// The next instant at which [`Liveness::due`] changes its answer.
    pub(crate) fn deadline(&self) -> Instant {
        match self.probed_at {
            None => self.last_rx + self.interval,
            Some(at) => at + self.timeout,
        }
    }

    /// What to do at `now`; records that an echo was sent when it says so.
    pub(crate) fn due(&mut self, now: Instant) -> Due {
        if now < self.deadline() {
            return Due::Nothing;
        }
        match self.probed_at {
            None => {
                self.probed_at = Some(now);
                Due::SendEcho
            }
            Some(_) => Due::Dead(now.saturating_duration_since(self.last_rx)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_then_declares_dead() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut l = Liveness::new(5 * s, 10 * s, t0);
        assert_eq!(l.due(t0 + 4 * s), Due::Nothing);
        assert_eq!(l.deadline(), t0 + 5 * s);
        assert_eq!(l.due(t0 + 5 * s), Due::SendEcho);
        assert_eq!(l.deadline(), t0 + 15 * s);
        assert_eq!(l.due(t0 + 14 * s), Due::Nothing);
        assert_eq!(l.due(t0 + 15 * s), Due::Dead(15 * s));
    }

    #[test]
    fn any_message_resets_the_timer() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut l = Liveness::new(5 * s, 10 * s, t0);
        assert_eq!(l.due(t0 + 5 * s), Due::SendEcho);
        l.on_rx(t0 + 6 * s);
        assert_eq!(l.deadline(), t0 + 11 * s);
        assert_eq!(l.due(t0 + 11 * s), Due::SendEcho);
    }
}
