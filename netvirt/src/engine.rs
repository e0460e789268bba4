//! Keeps one node's switch equal to the model, incrementally.
//!
//! After a connect (or a failed sync) the engine reads the switch and sends the full
//! difference; from then on each model change is re-rendered only where it changed
//! ([`Shards`]) and sent as one bundle holding just the steps it causes. A plan longer than
//! [`BUNDLE_MAX`] messages (a first sync of a big cluster) goes as several bundles in order,
//! each atomic: groups before the flows that use them, flows deleted before their groups.

use openflow::driver::{Error, SwitchHandle};
use openflow::msg::Body;

use crate::agent::{SyncReport, read_state};
use crate::apply::messages;
use crate::config::Config;
use crate::desired::{NodeBindings, ServicePortState};
use crate::model::{Model, Node};
use crate::shards::{Change, Shards};

/// The most messages in one bundle.
pub const BUNDLE_MAX: usize = 5_000;

/// One node's desired state and its switch.
pub struct Engine {
    switch: SwitchHandle,
    shards: Shards,
    /// Whether the switch holds exactly what `shards` held before the next update.
    in_sync: bool,
}

impl Engine {
    /// An engine for a freshly connected switch; its first sync reads the switch.
    pub fn new(switch: SwitchHandle) -> Self {
        Self {
            switch,
            shards: Shards::default(),
            in_sync: false,
        }
    }

    /// The switch.
    pub fn switch(&self) -> &SwitchHandle {
        &self.switch
    }

    /// The desired state, by shard.
    pub fn shards(&self) -> &Shards {
        &self.shards
    }

    /// Each service port's group and backends.
    pub fn services(&self) -> std::collections::BTreeMap<String, ServicePortState> {
        self.shards.services()
    }

    /// Brings the switch to the model's state for `node`. On error the engine reads the
    /// switch again on the next sync.
    pub async fn sync(
        &mut self,
        node: &Node,
        model: &Model,
        config: &Config,
        bindings: &NodeBindings,
    ) -> Result<SyncReport, Error> {
        let was_in_sync = std::mem::replace(&mut self.in_sync, false);
        let report = if was_in_sync {
            let delta = self.shards.update(node, model, config, bindings);
            for chunk in delta.chunks(BUNDLE_MAX) {
                self.switch.bundle(messages(chunk)).await?;
            }
            SyncReport::of(&delta)
        } else {
            self.shards.refresh(node, model, config, bindings);
            let actual = read_state(&self.switch).await?;
            let mut report = SyncReport::default();
            let mut plan = self.shards.full_plan(&actual);
            loop {
                let mut chunk: Vec<Body> = Vec::new();
                for (change, body) in plan.by_ref().take(BUNDLE_MAX) {
                    match change {
                        Change::AddFlow => report.flows_added += 1,
                        Change::ModifyFlow => report.flows_modified += 1,
                        Change::DeleteFlow => report.flows_deleted += 1,
                        Change::Group => report.groups_changed += 1,
                    }
                    chunk.push(body);
                }
                if chunk.is_empty() {
                    break;
                }
                self.switch.bundle(chunk).await?;
            }
            report
        };
        self.in_sync = true;
        Ok(report)
    }
}
