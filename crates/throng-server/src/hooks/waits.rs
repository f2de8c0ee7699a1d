//! A shard's joins and pushes waiting for the app backend: what each call
//! answers (which socket, topic, join_ref and ref), the count per socket
//! against `--hook-max-in-flight-per-socket`, and the pushes queued behind
//! the one in flight so that a socket's pushes on a topic reach the backend,
//! and are answered, in order. Owned by the shard's loop: no lock. A socket
//! with nothing waiting costs nothing here; a closed socket's waits are
//! forgotten, and a late answer for them is dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// What a call's answer completes.
#[derive(Debug)]
pub(crate) enum Waiting {
    /// A join held open until the backend decides.
    Join {
        join_ref: Option<throng_protocol::RefBuf>,
        msg_ref: Option<throng_protocol::RefBuf>,
        /// The presence key of a `--presence` rule, taken at the join.
        presence_key: Option<String>,
        /// The join's `since` (`crate::history::since_of`).
        since: Option<Option<String>>,
    },
    Push {
        join_ref: Option<throng_protocol::RefBuf>,
        msg_ref: Option<throng_protocol::RefBuf>,
    },
    /// A WebSocket upgrade held until the backend accepts the socket.
    Connect(Box<HeldUpgrade>),
    /// A long-poll session's first request, held the same way.
    LongPollConnect(Box<HeldSession>),
}

/// A new long-poll session waiting for the connect hook.
#[derive(Debug)]
pub(crate) struct HeldSession {
    pub vsn: throng_protocol::Vsn,
    pub connect: Option<crate::channel::ConnectInfo>,
    pub user: Option<String>,
    /// Its admission (`limits::Admission`), given back if refused.
    pub admitted: Option<Option<std::net::IpAddr>>,
    pub keep_alive: bool,
}

/// A WebSocket upgrade waiting for the connect hook.
#[derive(Debug)]
pub(crate) struct HeldUpgrade {
    /// The `101` response.
    pub response: Vec<u8>,
    pub vsn: throng_protocol::Vsn,
    /// permessage-deflate's server window bits, 0 if not negotiated.
    pub deflate: u8,
    pub connect: Option<crate::channel::ConnectInfo>,
    /// The user a token authenticated, if any (the backend's wins).
    pub user: Option<String>,
    /// A `GET /socket/check` (`crate::http`): accepted, `response` (a
    /// `204`) goes out and the connection closes.
    pub check: bool,
}

/// A call of connection (or long-poll session) `key` on `topic`.
#[derive(Debug)]
pub(crate) struct Wait {
    pub key: usize,
    pub topic: Arc<str>,
    pub what: Waiting,
}

/// A push behind the one in flight: its call id, its body, its wait.
type Queued = (u64, Vec<u8>, Wait);

#[derive(Default)]
pub(crate) struct Waits {
    next: u64,
    /// Calls sent, by id.
    calls: HashMap<u64, Wait>,
    /// Waits (sent or queued) per socket.
    per_socket: HashMap<usize, usize>,
    /// A socket's pushes on a topic behind the one in flight; an entry,
    /// even empty, means one is in flight.
    queues: HashMap<(usize, Arc<str>), VecDeque<Queued>>,
    /// What the connect hook answered as each socket's `assigns`: sent
    /// with its join requests. Empty without a connect hook.
    pub assigns: HashMap<usize, Box<serde_json::value::RawValue>>,
    /// Each socket's number in its `socket_id`, given the first time a hook
    /// request or an event names it and forgotten when it closes: a slab
    /// key is reused, this number never is (a 64-bit count per shard). Kept
    /// here rather than in the connection so that an idle socket no hook
    /// names costs nothing; one that is named costs an entry of this map
    /// (16 bytes and the map's slack).
    socket_ids: HashMap<usize, u64>,
    next_socket: u64,
}

impl Waits {
    pub fn next_id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// The number of socket `key` in its `socket_id`: new for each socket,
    /// the same for the socket's life.
    pub fn socket_number(&mut self, key: usize) -> u64 {
        let next = &mut self.next_socket;
        *self.socket_ids.entry(key).or_insert_with(|| {
            *next += 1;
            *next
        })
    }

    /// Calls waiting for their answer, and pushes queued behind one.
    pub fn len(&self) -> usize {
        self.calls.len() + self.queues.values().map(VecDeque::len).sum::<usize>()
    }

    /// Sockets with a `socket_id` number.
    pub fn socket_ids_len(&self) -> usize {
        self.socket_ids.len()
    }

    /// What socket `key` has waiting.
    pub fn held(&self, key: usize) -> usize {
        if self.per_socket.is_empty() {
            return 0;
        }
        self.per_socket.get(&key).copied().unwrap_or(0)
    }

    fn add(&mut self, key: usize) {
        *self.per_socket.entry(key).or_default() += 1;
    }

    /// One wait of `key` is over.
    pub fn done(&mut self, key: usize) {
        if let Some(n) = self.per_socket.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.per_socket.remove(&key);
            }
        }
    }

    /// Whether a push of `key` on `topic` is in flight (a new one queues).
    pub fn push_busy(&self, key: usize, topic: &str) -> bool {
        self.queues.contains_key(&(key, Arc::from(topic)))
    }

    /// Call `id` was sent. A push marks its socket and topic busy.
    pub fn start(&mut self, id: u64, wait: Wait) {
        self.add(wait.key);
        if matches!(wait.what, Waiting::Push { .. }) {
            self.queues
                .entry((wait.key, wait.topic.clone()))
                .or_default();
        }
        self.calls.insert(id, wait);
    }

    /// A push waits behind the one in flight on its topic.
    pub fn enqueue(&mut self, id: u64, body: Vec<u8>, wait: Wait) {
        self.add(wait.key);
        let q = self
            .queues
            .entry((wait.key, wait.topic.clone()))
            .or_default();
        q.push_back((id, body, wait));
    }

    /// The answer to call `id` came: its wait, if its socket still waits.
    pub fn finish(&mut self, id: u64) -> Option<Wait> {
        let wait = self.calls.remove(&id)?;
        self.done(wait.key);
        Some(wait)
    }

    /// The next queued push of `key` on `topic`, still counted (send it
    /// and [`Waits::resume`] it, or answer it and [`Waits::done`] it); none
    /// left, the topic is no longer busy.
    pub fn next_push(&mut self, key: usize, topic: &Arc<str>) -> Option<Queued> {
        let k = (key, topic.clone());
        let next = self.queues.get_mut(&k).and_then(VecDeque::pop_front);
        if next.is_none() {
            self.queues.remove(&k);
        }
        next
    }

    /// A queued push was sent.
    pub fn resume(&mut self, id: u64, wait: Wait) {
        self.calls.insert(id, wait);
    }

    /// A join of `key` on `topic` waiting is dropped (left, or joined again).
    pub fn cancel_join(&mut self, key: usize, topic: &str) -> bool {
        if self.held(key) == 0 {
            return false;
        }
        let found = self.calls.iter().find_map(|(id, w)| {
            (w.key == key && &*w.topic == topic && matches!(w.what, Waiting::Join { .. }))
                .then_some(*id)
        });
        match found {
            Some(id) => {
                self.finish(id);
                true
            }
            None => false,
        }
    }

    /// Socket `key` is gone: everything it waited for is forgotten (and
    /// returned, for what it holds: a held session's admission).
    pub fn forget(&mut self, key: usize) -> Vec<Wait> {
        let mut gone = Vec::new();
        // Every close passes here: nothing to hash without hooks in use.
        if self.per_socket.is_empty() && self.assigns.is_empty() && self.socket_ids.is_empty() {
            return gone;
        }
        if !self.socket_ids.is_empty() {
            self.socket_ids.remove(&key);
        }
        if !self.assigns.is_empty() {
            self.assigns.remove(&key);
        }
        if self.per_socket.remove(&key).is_none() {
            return gone;
        }
        gone.extend(self.calls.extract_if(|_, w| w.key == key).map(|(_, w)| w));
        self.queues.retain(|(k, _), _| *k != key);
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(key: usize, topic: &str) -> Wait {
        Wait {
            key,
            topic: topic.into(),
            what: Waiting::Push {
                join_ref: None,
                msg_ref: None,
            },
        }
    }

    fn join(key: usize, topic: &str) -> Wait {
        Wait {
            key,
            topic: topic.into(),
            what: Waiting::Join {
                join_ref: None,
                msg_ref: None,
                presence_key: None,
                since: None,
            },
        }
    }

    #[test]
    fn pushes_queue_behind_the_one_in_flight() {
        let mut w = Waits::default();
        let t: Arc<str> = "t".into();
        assert!(!w.push_busy(1, "t"));
        let a = w.next_id();
        w.start(a, push(1, "t"));
        assert!(w.push_busy(1, "t") && !w.push_busy(2, "t") && !w.push_busy(1, "u"));
        let b = w.next_id();
        w.enqueue(b, b"b".to_vec(), push(1, "t"));
        assert_eq!(w.held(1), 2);
        assert!(w.finish(a).is_some());
        let (id, body, wait) = w.next_push(1, &t).unwrap();
        assert_eq!((id, &body[..]), (b, &b"b"[..]));
        w.resume(id, wait);
        assert!(w.push_busy(1, "t"));
        assert!(w.finish(b).is_some());
        assert!(w.next_push(1, &t).is_none());
        assert!(!w.push_busy(1, "t"));
        assert_eq!(w.held(1), 0);
    }

    #[test]
    fn a_socket_number_is_never_reused() {
        let mut w = Waits::default();
        let a = w.socket_number(7);
        assert_eq!(w.socket_number(7), a, "stable for the socket's life");
        w.forget(7);
        let b = w.socket_number(7);
        assert_ne!(a, b, "the next socket on the same key gets a new one");
        assert_ne!(w.socket_number(8), b);
    }

    #[test]
    fn a_closed_socket_is_forgotten() {
        let mut w = Waits::default();
        let a = w.next_id();
        w.start(a, join(3, "t"));
        let b = w.next_id();
        w.start(b, push(3, "u"));
        w.enqueue(w.next + 1, vec![], push(3, "u"));
        w.forget(3);
        assert!(w.finish(a).is_none() && w.finish(b).is_none());
        assert_eq!(w.held(3), 0);
        assert!(!w.push_busy(3, "u"));
        let c = w.next_id();
        w.start(c, join(4, "t"));
        assert!(w.cancel_join(4, "t"));
        assert!(w.finish(c).is_none());
        assert_eq!(w.held(4), 0);
    }
}
