//! How often one switch gets a bundle: a burst of [`BURST`] goes at once, then one per
//! [`INTERVAL`], each with every change that came meanwhile.
//!
//! The rule is the generic cell rate algorithm (a token bucket of [`BURST`] tokens, one back
//! per [`INTERVAL`]): a switch that got no bundle for `BURST × INTERVAL` takes the next
//! `BURST` at once, and a long burst of changes reaches it at most once per interval after
//! those. One change that arrives as two (a Kubernetes Service and its EndpointSlice come on
//! two watches, in either order) is therefore not held back by the first half's bundle.
//!
//! Pure: the caller says when it is.

use std::time::Duration;

use tokio::time::Instant;

/// The least time between two bundles to one switch, once a burst has used its allowance.
pub(crate) const INTERVAL: Duration = Duration::from_millis(50);

/// How many bundles a switch that was idle takes without a pause.
pub(crate) const BURST: u32 = 3;

/// One switch's bundle pace.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// When the allowance would be whole again if no bundle came (the GCRA's theoretical
    /// arrival time); `None` before the first bundle.
    full_at: Option<Instant>,
}

impl Pace {
    /// When the next bundle may go: `None` for at once.
    pub(crate) fn next_at(&self, now: Instant) -> Option<Instant> {
        let full_at = self.full_at?;
        let at = full_at.checked_sub(INTERVAL * (BURST - 1))?;
        (at > now).then_some(at)
    }

    /// A bundle went (was confirmed) at `now`.
    pub(crate) fn sent(&mut self, now: Instant) {
        let from = self.full_at.map_or(now, |t| t.max(now));
        self.full_at = Some(from + INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bundles as fast as the pace allows, from `start`, for `span`: their times.
    fn flood(start: Instant, span: Duration) -> Vec<Instant> {
        let mut pace = Pace::default();
        let mut now = start;
        let mut sent = Vec::new();
        loop {
            if let Some(at) = pace.next_at(now) {
                now = at;
            }
            if now >= start + span {
                break;
            }
            pace.sent(now);
            sent.push(now);
        }
        sent
    }

    #[test]
    fn an_idle_switch_takes_a_burst_then_one_per_interval() {
        let start = Instant::now();
        let sent = flood(start, Duration::from_secs(1));
        let offsets: Vec<Duration> = sent.iter().map(|t| *t - start).collect();
        // Three at once, then one per interval.
        assert_eq!(
            &offsets[..BURST as usize],
            &[Duration::ZERO; BURST as usize]
        );
        for (k, d) in offsets.iter().enumerate().skip(BURST as usize) {
            assert_eq!(*d, INTERVAL * (k as u32 + 1 - BURST), "bundle {k}");
        }
        // Within one second: the burst, and one per interval after the first (50 ms to 950 ms).
        assert_eq!(sent.len(), (BURST - 1) as usize + 20);
    }

    #[test]
    fn the_allowance_comes_back_one_per_interval() {
        let start = Instant::now();
        let mut pace = Pace::default();
        for _ in 0..BURST {
            assert_eq!(pace.next_at(start), None);
            pace.sent(start);
        }
        assert_eq!(pace.next_at(start), Some(start + INTERVAL));
        // One interval later one more may go at once, and then the next waits again.
        let later = start + INTERVAL;
        assert_eq!(pace.next_at(later), None);
        pace.sent(later);
        assert_eq!(pace.next_at(later), Some(later + INTERVAL));
        // Idle for the whole allowance: a full burst again.
        let idle = later + INTERVAL * BURST;
        for _ in 0..BURST {
            assert_eq!(pace.next_at(idle), None);
            pace.sent(idle);
        }
        assert!(pace.next_at(idle).is_some());
    }

    #[test]
    fn two_isolated_bundles_never_wait() {
        // A change in two halves, each a bundle, 5 ms apart, every 100 ms.
        let start = Instant::now();
        let mut pace = Pace::default();
        for k in 0..100u32 {
            let first = start + Duration::from_millis(100) * k;
            for now in [first, first + Duration::from_millis(5)] {
                assert_eq!(pace.next_at(now), None, "change {k}");
                pace.sent(now);
            }
        }
    }
}
