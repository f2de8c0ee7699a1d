//! [`LocalBackplane`]: a node alone; there is nothing to carry.

use std::sync::Weak;

use super::{Backplane, Handler};
use crate::Broadcast;

/// A single node: broadcasts reach this node's subscribers and no one else.
pub struct LocalBackplane;

impl Backplane for LocalBackplane {
    fn attach(&self, _: Weak<dyn Handler>) {}
    fn publish(&self, _: &Broadcast) {}
    fn subscribe(&self, _: &str) {}
    fn unsubscribe(&self, _: &str) {}
}
