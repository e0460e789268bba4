//! Keeps one node's switch equal to the model: computes the desired state and syncs it
//! through a [`SwitchAgent`].

use openflow::driver::{Error, SwitchHandle};

use crate::agent::{SwitchAgent, SyncReport};
use crate::config::Config;
use crate::desired::{DesiredState, NodeBindings, desired};
use crate::model::{Model, Node};

/// One node's desired state and its switch.
pub struct Engine {
    agent: SwitchAgent,
    desired: Option<DesiredState>,
}

impl Engine {
    /// An engine for a freshly connected switch.
    pub fn new(switch: SwitchHandle) -> Self {
        Self {
            agent: SwitchAgent::new(switch),
            desired: None,
        }
    }

    /// The state last synced.
    pub fn desired(&self) -> Option<&DesiredState> {
        self.desired.as_ref()
    }

    /// Brings the switch to the model's state for `node`.
    pub async fn sync(
        &mut self,
        node: &Node,
        model: &Model,
        config: &Config,
        bindings: &NodeBindings,
    ) -> Result<SyncReport, Error> {
        let want = desired(node, model, config, bindings);
        let report = self.agent.sync(&want).await?;
        self.desired = Some(want);
        Ok(report)
    }
}
