//! [`Apps`]: the Pusher apps this node serves (`--pusher-app`,
//! `[[pusher.apps]]`), found by key (a socket's `/app/{key}`, an HTTP API
//! request's `auth_key`, whose app's id must be the API path's), with each
//! app's count of open sockets on this node (`max_connections`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::config::pusher::PusherApp;

/// The apps, and their sockets open on this node.
pub(crate) struct Apps {
    apps: Vec<PusherApp>,
    by_key: HashMap<String, u16>,
    open: Vec<AtomicUsize>,
}

impl Apps {
    pub fn new(apps: Vec<PusherApp>) -> Apps {
        let by_key = apps
            .iter()
            .enumerate()
            .map(|(i, a)| (a.key.clone(), i as u16))
            .collect();
        let open = apps.iter().map(|_| AtomicUsize::new(0)).collect();
        Apps { apps, by_key, open }
    }

    /// Whether any app is configured (Pusher is off without one).
    pub fn is_empty(&self) -> bool {
        self.apps.is_empty()
    }

    /// The app with this key.
    pub fn by_key(&self, key: &str) -> Option<u16> {
        self.by_key.get(key).copied()
    }

    /// App `i`.
    #[inline]
    pub fn get(&self, i: u16) -> &PusherApp {
        &self.apps[i as usize]
    }

    /// Counts a new socket of app `i`: false (and nothing counted) when the
    /// app already holds its `max_connections` on this node.
    pub fn admit(&self, i: u16) -> bool {
        let open = &self.open[i as usize];
        match self.apps[i as usize].max_connections {
            None => {
                open.fetch_add(1, Relaxed);
                true
            }
            Some(max) => open
                .fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1))
                .is_ok(),
        }
    }

    /// A socket of app `i` ended.
    pub fn release(&self, i: u16) {
        self.open[i as usize].fetch_sub(1, Relaxed);
    }

    /// App `i`'s sockets open on this node.
    pub fn open(&self, i: u16) -> usize {
        self.open[i as usize].load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(id: &str, max: Option<usize>) -> PusherApp {
        PusherApp {
            id: id.into(),
            key: format!("key-{id}"),
            secret: "0123456789abcdef0123".into(),
            webhook_url: None,
            max_connections: max,
            client_events: true,
            max_presence_members: 100,
            max_event_bytes: 10240,
            encrypted_channels: true,
        }
    }

    #[test]
    fn found_by_key_and_counted() {
        let apps = Apps::new(vec![app("1", None), app("2", Some(2))]);
        assert_eq!(apps.by_key("key-2"), Some(1));
        assert_eq!(apps.get(0).id, "1");
        assert_eq!(apps.by_key("nope"), None);
        assert!(apps.admit(1) && apps.admit(1) && !apps.admit(1));
        assert_eq!(apps.open(1), 2);
        apps.release(1);
        assert!(apps.admit(1));
        assert!(apps.admit(0));
    }
}
