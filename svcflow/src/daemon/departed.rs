//! What svcflow last put on a switch that has left: kept so that `svcflow plan` can say what
//! it would change once the switch is back (a REST change made meanwhile shows up at once).
//!
//! A node's task holds its engine in a [`Kept`]; when the task ends, however it ends (its
//! switch left and the dispatcher aborted it, shutdown, a lost mastership), dropping it moves
//! the engine's desired state, as last synced, here. The node's next task takes it out again.
//! No I/O: the map is read by the operational view.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use netvirt::desired::NodeBindings;
use netvirt::engine::Engine;
use netvirt::shards::Shards;

/// A node whose switch left, as svcflow last synced it.
pub(crate) struct Departed {
    /// The desired state of the last sync.
    pub shards: Shards,
    /// Whether the switch confirmed that state (false: its last sync failed, so the switch
    /// may hold less).
    pub confirmed: bool,
    /// The node's port bindings then.
    pub bindings: Option<NodeBindings>,
    /// When its task ended.
    pub since: SystemTime,
}

/// The departed nodes, by name; shared by the node tasks and the operational view.
pub(crate) type DepartedNodes = Arc<RwLock<BTreeMap<String, Departed>>>;

/// A node task's engine, handed to [`DepartedNodes`] when the task ends.
pub(crate) struct Kept {
    node: String,
    engine: Option<Engine>,
    departed: DepartedNodes,
    /// Whether the engine ever synced the switch (else there is nothing worth keeping).
    pub synced: bool,
    /// The bindings of the last sync.
    pub bindings: Option<NodeBindings>,
}

impl Kept {
    /// Keeps `engine` for `node`, whose switch is back: what was kept of it before goes.
    pub(crate) fn new(node: &str, engine: Engine, departed: DepartedNodes) -> Self {
        if let Ok(mut map) = departed.write() {
            map.remove(node);
        }
        Self {
            node: node.to_string(),
            engine: Some(engine),
            departed,
            synced: false,
            bindings: None,
        }
    }
}

impl std::ops::Deref for Kept {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        // Some until dropped.
        self.engine
            .as_ref()
            .unwrap_or_else(|| unreachable!("taken only in drop"))
    }
}

impl std::ops::DerefMut for Kept {
    fn deref_mut(&mut self) -> &mut Engine {
        self.engine
            .as_mut()
            .unwrap_or_else(|| unreachable!("taken only in drop"))
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let Some(engine) = self.engine.take().filter(|_| self.synced) else {
            return;
        };
        let confirmed = engine.in_sync();
        let departed = Departed {
            shards: engine.into_shards(),
            confirmed,
            bindings: self.bindings.take(),
            since: SystemTime::now(),
        };
        if let Ok(mut map) = self.departed.write() {
            map.insert(self.node.clone(), departed);
        }
    }
}
