//! [`LocalPresence`]: a node alone; its tracker holds every presence there
//! is, and there is no one to tell.

use std::sync::Weak;

use super::{Delta, PresenceSink, PresenceStore};

/// A single node's presence store: nothing to store or carry.
pub struct LocalPresence {
    node_id: u64,
}

impl LocalPresence {
    pub fn new() -> LocalPresence {
        LocalPresence {
            node_id: crate::backplane::redis::random_node_id(),
        }
    }
}

impl Default for LocalPresence {
    fn default() -> Self {
        LocalPresence::new()
    }
}

impl PresenceStore for LocalPresence {
    fn attach(&self, _: Weak<dyn PresenceSink>) {}
    fn node_id(&self) -> u64 {
        self.node_id
    }
    fn publish(&self, _: &str, _: Delta) {}
    fn watch(&self, _: &str) {}
    fn unwatch(&self, _: &str) {}
}
