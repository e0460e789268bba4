//! Each node's record for the operational nodes view and the status page: its switch
//! connection, the totals of its last successful sync, and its last [`HISTORY`] syncs.
//!
//! Fed where the metrics are told of the same events: the dispatcher says when a node's
//! switch connects and goes ([`Status::connected`], [`Status::disconnected`]), the node's task
//! says how each sync went ([`Status::synced`], [`Status::failed`]). Bounded: a few syncs per
//! node, and a node's record is dropped once it has left the model and its switch is gone
//! ([`Status::read`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use coe::rest::operational::SyncState;
use openflow::driver::SwitchHandle;

/// How many syncs are kept per node.
pub(crate) const HISTORY: usize = 10;

/// The longest error text kept for a failed sync.
const ERROR_CHARS: usize = 300;

/// One node's record.
#[derive(Clone, Default)]
pub(crate) struct NodeRecord {
    /// Its switch's connection and handle, while connected.
    pub switch: Option<(u64, SwitchHandle)>,
    /// Flows and groups desired, as of the last successful sync.
    pub totals: Option<(u64, u64)>,
    /// The last successful sync.
    pub last_ok: Option<SyncState>,
    /// The last syncs, newest first.
    pub history: VecDeque<SyncState>,
}

/// Every node's record.
#[derive(Default)]
pub(crate) struct Status {
    nodes: Mutex<BTreeMap<String, NodeRecord>>,
}

impl Status {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, NodeRecord>) -> T) -> T {
        f(&mut self.nodes.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// `node`'s switch is connected as `connection`.
    pub(crate) fn connected(&self, node: &str, connection: u64, switch: SwitchHandle) {
        self.with(|nodes| {
            nodes.entry(node.to_string()).or_default().switch = Some((connection, switch));
        });
    }

    /// `node`'s switch on `connection` is gone (a later connection's stays).
    pub(crate) fn disconnected(&self, node: &str, connection: u64) {
        self.with(|nodes| {
            if let Some(r) = nodes.get_mut(node)
                && r.switch.as_ref().is_some_and(|(c, _)| *c == connection)
            {
                r.switch = None;
            }
        });
    }

    /// `node`'s switch was synced to `revision` in `took`, with `report`'s changes; `totals`
    /// flows and groups are desired on it.
    pub(crate) fn synced(
        &self,
        node: &str,
        revision: u64,
        took: Duration,
        report: &netvirt::agent::SyncReport,
        totals: (usize, usize),
    ) {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let sync = SyncState {
            time: now(),
            revision,
            result: "ok".into(),
            // Microsecond precision.
            duration_ms: Some(took.as_micros() as f64 / 1000.0),
            error: None,
            flows_added: count(report.flows_added),
            flows_modified: count(report.flows_modified),
            flows_deleted: count(report.flows_deleted),
            groups_changed: count(report.groups_changed),
            conntrack_flushed: count(report.conntrack_flushed),
        };
        self.with(|nodes| {
            let r = nodes.entry(node.to_string()).or_default();
            r.totals = Some((count(totals.0), count(totals.1)));
            r.last_ok = Some(sync.clone());
            push(&mut r.history, sync);
        });
    }

    /// A sync of `node`'s switch to `revision` failed, for `error`.
    pub(crate) fn failed(&self, node: &str, revision: u64, error: &str) {
        let error: String = error.chars().take(ERROR_CHARS).collect();
        let sync = SyncState {
            time: now(),
            revision,
            result: "failed".into(),
            duration_ms: None,
            error: Some(error),
            flows_added: 0,
            flows_modified: 0,
            flows_deleted: 0,
            groups_changed: 0,
            conntrack_flushed: 0,
        };
        self.with(|nodes| {
            push(
                &mut nodes.entry(node.to_string()).or_default().history,
                sync,
            )
        });
    }

    /// A copy of every record, after dropping those of nodes that are not in `model_nodes`
    /// and whose switch is not connected.
    pub(crate) fn read(&self, model_nodes: &BTreeSet<String>) -> BTreeMap<String, NodeRecord> {
        self.with(|nodes| {
            nodes.retain(|name, r| model_nodes.contains(name) || r.switch.is_some());
            nodes.clone()
        })
    }
}

fn push(history: &mut VecDeque<SyncState>, sync: SyncState) {
    history.push_front(sync);
    history.truncate(HISTORY);
}

/// Now, as RFC 3339 UTC with milliseconds (`2026-11-24T09:41:00.120Z`).
fn now() -> String {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = super::metrics::rfc3339(since.as_secs());
    let whole = secs.strip_suffix('Z').unwrap_or(&secs);
    format!("{whole}.{:03}Z", since.subsec_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvirt::agent::SyncReport;

    #[test]
    fn a_node_keeps_its_last_syncs_newest_first_and_its_last_success() {
        let status = Status::default();
        let report = SyncReport {
            flows_added: 7,
            groups_changed: 2,
            ..SyncReport::default()
        };
        status.synced("n1", 1, Duration::from_micros(12_345), &report, (40, 3));
        for revision in 2..=HISTORY as u64 + 3 {
            status.synced(
                "n1",
                revision,
                Duration::ZERO,
                &SyncReport::default(),
                (41, 3),
            );
        }
        status.failed("n1", 99, &"x".repeat(1000));
        let all = status.read(&BTreeSet::from(["n1".to_string()]));
        let n1 = &all["n1"];
        assert_eq!(n1.history.len(), HISTORY);
        assert_eq!(n1.history[0].result, "failed");
        assert_eq!(n1.history[0].revision, 99);
        assert_eq!(
            n1.history[0].error.as_ref().map(String::len),
            Some(ERROR_CHARS)
        );
        assert_eq!(n1.history[1].revision, HISTORY as u64 + 3);
        let last = n1.last_ok.as_ref().unwrap();
        assert_eq!(last.revision, HISTORY as u64 + 3);
        assert_eq!(n1.totals, Some((41, 3)));
        assert!(
            last.time.ends_with('Z') && last.time.len() == 24,
            "{}",
            last.time
        );
    }

    #[test]
    fn the_first_sync_reports_its_changes_and_duration() {
        let status = Status::default();
        let report = SyncReport {
            flows_added: 7,
            flows_modified: 1,
            flows_deleted: 2,
            groups_changed: 3,
            conntrack_flushed: 4,
        };
        status.synced("n1", 5, Duration::from_micros(12_345), &report, (40, 3));
        let all = status.read(&BTreeSet::from(["n1".to_string()]));
        let s = &all["n1"].history[0];
        assert_eq!(
            (s.flows_added, s.flows_modified, s.flows_deleted),
            (7, 1, 2)
        );
        assert_eq!((s.groups_changed, s.conntrack_flushed), (3, 4));
        assert_eq!(s.duration_ms, Some(12.345));
        assert_eq!(s.result, "ok");
    }

    #[test]
    fn nodes_that_left_the_model_without_a_switch_are_forgotten() {
        let status = Status::default();
        status.synced("gone", 1, Duration::ZERO, &Default::default(), (1, 1));
        status.synced("kept", 1, Duration::ZERO, &Default::default(), (1, 1));
        let all = status.read(&BTreeSet::from(["kept".to_string()]));
        assert_eq!(all.keys().collect::<Vec<_>>(), ["kept"]);
        assert!(status.read(&BTreeSet::new()).is_empty());
    }
}
