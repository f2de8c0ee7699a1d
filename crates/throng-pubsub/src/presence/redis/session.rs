//! The `throng-presence` thread's side of the store: a [`Worker`] of the
//! [Redis link](crate::link) that runs the change scripts, applies other
//! nodes' messages, takes snapshots of newly watched topics, refreshes this
//! node's liveness key and checks the others'; on each new session it
//! rewrites this node's state and watches its topics again. Connecting,
//! timeouts and reconnecting are the link's.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use ::redis::Value;
use tokio::sync::mpsc;

use super::names::Names;
use super::{node_hex, scripts, Stats, Timing, PREFIX};
use crate::link::{timed, End, Health, Link, RResult, Worker};
use crate::presence::wire::{self, Message};
use crate::presence::{Delta, Entries, FetchReply, PresenceSink};

/// Change scripts sent in one pipeline.
const MAX_BATCH: usize = 256;

/// What one session has seen: its subscriptions, its scripts' hashes.
pub(super) struct Session {
    subscribed: HashSet<Arc<str>>,
    flush: String,
    resync: String,
    clean: String,
    /// Key and channel names (one Redis or a cluster).
    names: Names,
    /// On a cluster, the one-topic scripts (`scripts::*_SHARDED`).
    flush_sharded: String,
    replace_sharded: String,
    /// Other nodes whose liveness key this session found missing, since when.
    missing: HashMap<u64, Instant>,
    /// This session's token: the value of this node's liveness key, which
    /// every change script checks (see `scripts.rs`: a stale session's
    /// script, reaching Redis late, changes nothing).
    token: String,
}

impl Session {
    /// Loads the scripts on `link`.
    async fn load(link: &mut Link) -> RResult<Session> {
        let load = |src: &'static str| {
            let mut c = ::redis::cmd("SCRIPT");
            c.arg("LOAD").arg(src);
            c
        };
        let names = Names {
            cluster: link.is_cluster(),
        };
        let mut s = Session {
            subscribed: HashSet::new(),
            flush: String::new(),
            resync: String::new(),
            clean: String::new(),
            names,
            flush_sharded: String::new(),
            replace_sharded: String::new(),
            missing: HashMap::new(),
            token: format!("{:016x}", crate::link::random_node_id()),
        };
        if names.cluster {
            s.flush_sharded =
                timed(load(scripts::FLUSH_SHARDED).query_async(&mut link.cmd)).await?;
            s.replace_sharded =
                timed(load(scripts::REPLACE_SHARDED).query_async(&mut link.cmd)).await?;
        } else {
            s.flush = timed(load(scripts::FLUSH).query_async(&mut link.cmd)).await?;
            s.resync = timed(load(scripts::RESYNC).query_async(&mut link.cmd)).await?;
            s.clean = timed(load(scripts::CLEAN).query_async(&mut link.cmd)).await?;
        }
        Ok(s)
    }
}

/// The thread's state.
pub(super) struct Task {
    pub me: u64,
    pub timing: Timing,
    pub sink: Arc<OnceLock<Weak<dyn PresenceSink>>>,
    pub stats: Arc<Stats>,
    pub resync: Arc<AtomicBool>,
    pub publish_rx: mpsc::Receiver<(Arc<str>, Delta)>,
    pub topic_rx: mpsc::UnboundedReceiver<(Arc<str>, bool)>,
    pub fetch_rx: mpsc::UnboundedReceiver<(Arc<str>, FetchReply)>,
    pub halt_rx: mpsc::UnboundedReceiver<()>,
}

impl Worker for Task {
    type Session = Session;
    const WHAT: &'static str = "presence";
    const MEANWHILE: &'static str = "every node keeps its copy and local diffs";

    fn health(&self) -> &Health {
        &self.stats.link
    }

    /// A new session: this node's whole state written, its topics watched.
    async fn setup(&mut self, link: &mut Link) -> RResult<Session> {
        let mut s = Session::load(link).await?;
        // Changes queued so far are in the state about to be written.
        while self.publish_rx.try_recv().is_ok() {}
        while self.topic_rx.try_recv().is_ok() {}
        self.rewrite(link, &mut s).await?;
        let watched = self.sink().map(|k| k.watched()).unwrap_or_default();
        for topic in watched {
            self.watch(link, &mut s, topic).await?;
        }
        Ok(s)
    }

    async fn serve(&mut self, link: &mut Link, s: &mut Session) -> End {
        self.serve_session(link, s).await
    }

    fn idle(&mut self) -> bool {
        !self.publish_rx.is_closed()
            && matches!(
                self.halt_rx.try_recv(),
                Err(mpsc::error::TryRecvError::Empty)
            )
    }

    fn back(&self, s: &Session) -> String {
        format!(
            "rewrote this node's presences and re-read the others' on {} topics",
            s.subscribed.len()
        )
    }
}

impl Task {
    fn sink(&self) -> Option<Arc<dyn PresenceSink>> {
        self.sink.get().and_then(Weak::upgrade)
    }

    /// The nodes other than this one in `listed` or with presences in
    /// `sink`, each once.
    fn others(&self, mut listed: HashSet<u64>, sink: &dyn PresenceSink) -> Vec<u64> {
        listed.extend(sink.owners());
        listed.remove(&self.me);
        listed.into_iter().collect()
    }

    async fn serve_session(&mut self, link: &mut Link, s: &mut Session) -> End {
        let mut tick = tokio::time::interval(self.timing.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            if self.resync.load(Relaxed) {
                if let Err(e) = self.rewrite(link, s).await {
                    return e.into();
                }
            }
            let step: Result<(), End> = tokio::select! {
                msg = link.next_message() => match msg {
                    Ok(msg) => {
                        self.on_message(s.names, msg.get_channel_name(), msg.get_payload_bytes());
                        Ok(())
                    }
                    Err(e) => Err(End::Lost(e)),
                },
                first = self.publish_rx.recv() => match first {
                    Some(first) => self.publish(link, s, first).await,
                    None => Err(End::Stop),
                },
                topic = self.topic_rx.recv() => match topic {
                    Some(first) => self.topics(link, s, first).await.map_err(End::from),
                    None => Err(End::Stop),
                },
                fetch = self.fetch_rx.recv() => match fetch {
                    Some((topic, done)) => self.fetch(link, s.names, topic, done).await.map_err(End::from),
                    None => Err(End::Stop),
                },
                _ = tick.tick() => self.keep_alive(link, s).await.map_err(End::from),
                _ = self.halt_rx.recv() => Err(End::Stop),
            };
            if let Err(e) = step {
                return e;
            }
        }
    }

    fn on_message(&self, names: Names, channel: &str, bytes: &[u8]) {
        let Some(topic) = names.topic_of(channel) else {
            return;
        };
        let msg = match wire::decode(bytes) {
            Ok(m) => m,
            Err(e) => {
                let n = self.stats.invalid.fetch_add(1, Relaxed);
                if n.is_power_of_two() || n == 0 {
                    tracing::warn!(error = %e, count = n + 1, "presence: dropped an unreadable message");
                }
                return;
            }
        };
        let Some(sink) = self.sink() else { return };
        match msg {
            Message::Delta(d) => {
                if d.joins
                    .iter()
                    .chain(&d.leaves)
                    .any(|(_, m)| m.owner == self.me)
                {
                    return; // ours
                }
                self.stats.received.fetch_add(1, Relaxed);
                sink.apply(topic, d);
            }
            Message::Replace { owner, entries } => {
                if owner == self.me {
                    return;
                }
                self.stats.received.fetch_add(1, Relaxed);
                sink.replace(topic, owner, entries);
            }
        }
    }

    /// Runs the change scripts of `first` and whatever else is queued.
    async fn publish(
        &mut self,
        link: &mut Link,
        s: &mut Session,
        first: (Arc<str>, Delta),
    ) -> Result<(), End> {
        if s.names.cluster {
            return self.publish_sharded(link, s, first).await;
        }
        let me = node_hex(self.me);
        let mut pipe = ::redis::pipe();
        let mut n = 0u64;
        let mut next = Some(first);
        while let Some((topic, delta)) = next {
            let c = pipe.cmd("EVALSHA").arg(&s.flush).arg(4);
            c.arg(format!("{PREFIX}a:{me}"))
                .arg(format!("{PREFIX}e:{me}:{topic}"))
                .arg(format!("{PREFIX}n:{topic}"))
                .arg(format!("{PREFIX}t:{me}"));
            c.arg(&me)
                .arg(&*topic)
                .arg(s.names.channel(&topic))
                .arg(wire::delta(self.me, &delta))
                .arg(&s.token)
                .arg(delta.joins.len());
            for (k, m) in &delta.joins {
                c.arg(&wire::field(m)[..]).arg(wire::value(k, m));
            }
            for (_, m) in &delta.leaves {
                c.arg(&wire::field(m)[..]);
            }
            n += 1;
            next = if n < MAX_BATCH as u64 {
                self.publish_rx.try_recv().ok()
            } else {
                None
            };
        }
        match timed(pipe.query_async::<Vec<i64>>(&mut link.cmd)).await {
            Ok(results) => {
                self.stats.published.fetch_add(n, Relaxed);
                if results.contains(&0) && !self.resync.swap(true, Relaxed) {
                    tracing::warn!("presence: this node's liveness key was gone (it was too slow); rewriting its presences");
                }
                Ok(())
            }
            Err(e) => {
                self.stats.dropped.fetch_add(n, Relaxed);
                self.resync.store(true, Relaxed);
                Err(End::Lost(e))
            }
        }
    }

    /// On a cluster: the one-topic change scripts of `first` and whatever
    /// else is queued (split per shard by the router), then the node's
    /// topic set. The liveness check is [`Task::keep_alive`]'s (a node found
    /// buried rewrites everything within `timeout / 10`).
    async fn publish_sharded(
        &mut self,
        link: &mut Link,
        s: &mut Session,
        first: (Arc<str>, Delta),
    ) -> Result<(), End> {
        let me = node_hex(self.me);
        let names = s.names;
        let mut pipe = ::redis::pipe();
        let mut topics = Vec::new();
        let mut next = Some(first);
        while let Some((topic, delta)) = next {
            let c = pipe.cmd("EVALSHA").arg(&s.flush_sharded).arg(2);
            c.arg(names.entries(&me, &topic))
                .arg(names.owners_of(&topic))
                .arg(&me)
                .arg(names.channel(&topic))
                .arg(wire::delta(self.me, &delta))
                .arg(delta.joins.len());
            for (k, m) in &delta.joins {
                c.arg(&wire::field(m)[..]).arg(wire::value(k, m));
            }
            for (_, m) in &delta.leaves {
                c.arg(&wire::field(m)[..]);
            }
            topics.push(topic);
            next = if topics.len() < MAX_BATCH {
                self.publish_rx.try_recv().ok()
            } else {
                None
            };
        }
        let n = topics.len() as u64;
        let written = async {
            let has: Vec<i64> = timed(pipe.query_async(&mut link.cmd)).await?;
            let mut set = ::redis::pipe();
            for (topic, has) in topics.iter().zip(has) {
                let op = if has == 1 { "SADD" } else { "SREM" };
                set.cmd(op).arg(names.topics_of(&me)).arg(&**topic).ignore();
            }
            timed(set.query_async::<()>(&mut link.cmd)).await
        };
        match written.await {
            Ok(()) => {
                self.stats.published.fetch_add(n, Relaxed);
                Ok(())
            }
            Err(e) => {
                self.stats.dropped.fetch_add(n, Relaxed);
                self.resync.store(true, Relaxed);
                Err(End::Lost(e))
            }
        }
    }

    /// On a cluster: this node's whole state, one script per topic (its
    /// old topics cleared), and only then its topic set and liveness key,
    /// so an owner seen alive has its presences written.
    async fn rewrite_sharded(&mut self, link: &mut Link, s: &mut Session) -> RResult<()> {
        let owned = self.sink().map(|k| k.owned()).unwrap_or_default();
        let me = node_hex(self.me);
        let names = s.names;
        let before: Vec<String> = timed(
            ::redis::cmd("SMEMBERS")
                .arg(names.topics_of(&me))
                .query_async(&mut link.cmd),
        )
        .await?;
        let mut pipe = ::redis::pipe();
        let mut keep = HashSet::new();
        for (topic, entries) in &owned {
            let c = pipe.cmd("EVALSHA").arg(&s.replace_sharded).arg(2);
            c.arg(names.entries(&me, topic))
                .arg(names.owners_of(topic))
                .arg(&me)
                .arg(names.channel(topic))
                .arg(wire::replace(self.me, entries))
                .arg(entries.len());
            for (k, m) in entries {
                c.arg(&wire::field(m)[..]).arg(wire::value(k, m));
            }
            c.ignore();
            if !entries.is_empty() {
                keep.insert(&**topic);
            }
        }
        for topic in before.iter().filter(|t| !keep.contains(t.as_str())) {
            pipe.cmd("EVALSHA")
                .arg(&s.replace_sharded)
                .arg(2)
                .arg(names.entries(&me, topic))
                .arg(names.owners_of(topic))
                .arg(&me)
                .arg(names.channel(topic))
                .arg(wire::replace(self.me, &[]))
                .arg(0)
                .ignore();
        }
        if !pipe.is_empty() {
            timed(pipe.query_async::<()>(&mut link.cmd)).await?;
        }
        let mut node = ::redis::pipe();
        node.cmd("DEL").arg(names.topics_of(&me)).ignore();
        if !keep.is_empty() {
            node.cmd("SADD")
                .arg(names.topics_of(&me))
                .arg(keep.iter().copied().collect::<Vec<&str>>())
                .ignore();
        }
        node.cmd("SET")
            .arg(names.alive(&me))
            .arg(&s.token)
            .arg("PX")
            .arg(self.timing.ttl.as_millis() as u64)
            .ignore();
        node.cmd("SADD").arg(names.nodes()).arg(&me).ignore();
        timed(node.query_async::<()>(&mut link.cmd)).await?;
        self.stats.resyncs.fetch_add(1, Relaxed);
        Ok(())
    }

    /// On a cluster: buries dead node `d` (its liveness key still gone):
    /// whoever takes it out of the node set clears its topics, one script
    /// each. Returns whether this node did.
    async fn clean_sharded(&mut self, link: &mut Link, s: &Session, d: u64) -> RResult<bool> {
        let names = s.names;
        let h = node_hex(d);
        let alive: i64 = timed(
            ::redis::cmd("EXISTS")
                .arg(names.alive(&h))
                .query_async(&mut link.cmd),
        )
        .await?;
        if alive == 1 {
            return Ok(false);
        }
        let claimed: i64 = timed(
            ::redis::cmd("SREM")
                .arg(names.nodes())
                .arg(&h)
                .query_async(&mut link.cmd),
        )
        .await?;
        let topics: Vec<String> = timed(
            ::redis::cmd("SMEMBERS")
                .arg(names.topics_of(&h))
                .query_async(&mut link.cmd),
        )
        .await?;
        if claimed == 0 && topics.is_empty() {
            return Ok(false);
        }
        let mut pipe = ::redis::pipe();
        for topic in &topics {
            pipe.cmd("EVALSHA")
                .arg(&s.replace_sharded)
                .arg(2)
                .arg(names.entries(&h, topic))
                .arg(names.owners_of(topic))
                .arg(&h)
                .arg(names.channel(topic))
                .arg(wire::replace(d, &[]))
                .arg(0)
                .ignore();
        }
        pipe.cmd("DEL").arg(names.topics_of(&h)).ignore();
        timed(pipe.query_async::<()>(&mut link.cmd)).await?;
        Ok(true)
    }

    /// Writes this node's whole state and its liveness key (one script).
    async fn rewrite(&mut self, link: &mut Link, s: &mut Session) -> RResult<()> {
        self.resync.store(false, Relaxed);
        if s.names.cluster {
            return self.rewrite_sharded(link, s).await;
        }
        let owned = self.sink().map(|k| k.owned()).unwrap_or_default();
        let me = node_hex(self.me);
        let mut c = ::redis::cmd("EVALSHA");
        c.arg(&s.resync)
            .arg(3)
            .arg(format!("{PREFIX}a:{me}"))
            .arg(format!("{PREFIX}t:{me}"))
            .arg(format!("{PREFIX}nodes"))
            .arg(&me)
            .arg(self.timing.ttl.as_millis() as u64)
            .arg(PREFIX)
            .arg(PREFIX)
            .arg(wire::replace(self.me, &[]))
            .arg(&s.token)
            .arg(owned.len());
        for (topic, entries) in &owned {
            c.arg(&**topic)
                .arg(wire::replace(self.me, entries))
                .arg(entries.len());
            for (k, m) in entries {
                c.arg(&wire::field(m)[..]).arg(wire::value(k, m));
            }
        }
        let _: i64 = timed(c.query_async(&mut link.cmd)).await?;
        self.stats.resyncs.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Subscribes `topic`'s presence channel if needed, then reads every
    /// live node's presences there (messages arriving meanwhile wait in the
    /// stream and are applied after, so nothing newer is overwritten).
    async fn watch(&mut self, link: &mut Link, s: &mut Session, topic: Arc<str>) -> RResult<()> {
        if !s.subscribed.contains(&topic) {
            timed(link.sink.subscribe(s.names.channel(&topic))).await?;
            s.subscribed.insert(topic.clone());
        }
        let Some(sink) = self.sink() else {
            return Ok(());
        };
        let listed = read_nodes(link, s.names.owners_of(&topic)).await?;
        let owners = self.others(listed, &*sink);
        if owners.is_empty() {
            return Ok(());
        }
        for (o, entries) in self.read_owners(link, s.names, &topic, &owners).await? {
            sink.replace(&topic, o, entries);
        }
        Ok(())
    }

    /// The presences on `topic` of those of `owners` whose liveness key
    /// exists, read with the keys in one MULTI (an owner seen alive has
    /// all its presences written: see `scripts::RESYNC`).
    async fn read_owners(
        &self,
        link: &mut Link,
        names: Names,
        topic: &str,
        owners: &[u64],
    ) -> RResult<Vec<(u64, Entries)>> {
        let mut out = Vec::new();
        if owners.is_empty() {
            return Ok(out);
        }
        let mut pipe = ::redis::pipe();
        // On a cluster the keys span slots: no transaction, but a node's
        // liveness key is written after all its presences (see
        // `rewrite_sharded`), so alive still means written.
        if !names.cluster {
            pipe.atomic();
        }
        for o in owners {
            let h = node_hex(*o);
            pipe.cmd("EXISTS").arg(names.alive(&h));
            pipe.cmd("HGETALL").arg(names.entries(&h, topic));
        }
        let replies: Vec<Value> = timed(pipe.query_async(&mut link.cmd)).await?;
        for (o, pair) in owners.iter().zip(replies.chunks(2)) {
            let [alive, hash] = pair else { continue };
            let alive: i64 = ::redis::from_redis_value(alive).unwrap_or(0);
            if alive == 0 {
                continue; // dead or not yet back: its presences stay as they are
            }
            let fields: Vec<(Vec<u8>, Vec<u8>)> =
                ::redis::from_redis_value(hash).unwrap_or_default();
            let mut entries: Entries = Vec::with_capacity(fields.len());
            for (f, v) in &fields {
                match wire::read_value(*o, f, v) {
                    Ok(e) => entries.push(e),
                    Err(_) => {
                        self.stats.invalid.fetch_add(1, Relaxed);
                    }
                }
            }
            out.push((*o, entries));
        }
        Ok(out)
    }

    /// Every live node's presences on `topic` (a topic this node need not
    /// watch), handed to `done`; a Redis error goes to `done` too, and
    /// ends the session.
    async fn fetch(
        &mut self,
        link: &mut Link,
        names: Names,
        topic: Arc<str>,
        done: FetchReply,
    ) -> RResult<()> {
        let read = async {
            let mut owners: Vec<u64> = read_nodes(link, names.owners_of(&topic))
                .await?
                .into_iter()
                .collect();
            owners.sort_unstable();
            self.read_owners(link, names, &topic, &owners).await
        };
        match read.await {
            Ok(mut found) => {
                found.retain(|(_, e)| !e.is_empty());
                done(Ok(found));
                Ok(())
            }
            Err(e) => {
                done(Err(crate::Error::PresenceUnavailable(e.to_string())));
                Err(e)
            }
        }
    }

    /// Watches and unwatches as the node's topics say now.
    async fn topics(
        &mut self,
        link: &mut Link,
        s: &mut Session,
        first: (Arc<str>, bool),
    ) -> RResult<()> {
        let mut changed: HashMap<Arc<str>, bool> = HashMap::new();
        let mut next = Some(first);
        while let Some((t, watch)) = next {
            *changed.entry(t).or_default() |= watch;
            next = self.topic_rx.try_recv().ok();
        }
        let Some(sink) = self.sink() else {
            return Ok(());
        };
        for (topic, asked) in changed {
            if topic.is_empty() {
                continue;
            }
            let wanted = sink.is_watched(&topic);
            if wanted && (asked || !s.subscribed.contains(&topic)) {
                self.watch(link, s, topic).await?;
            } else if !wanted && s.subscribed.contains(&topic) {
                timed(link.sink.unsubscribe(s.names.channel(&topic))).await?;
                s.subscribed.remove(&topic);
            }
        }
        Ok(())
    }

    /// Refreshes this node's liveness key and checks the others'.
    async fn keep_alive(&mut self, link: &mut Link, s: &mut Session) -> RResult<()> {
        let me = node_hex(self.me);
        let names = s.names;
        let set: Option<String> = timed(
            ::redis::cmd("SET")
                .arg(names.alive(&me))
                .arg(&s.token)
                .arg("XX")
                .arg("PX")
                .arg(self.timing.ttl.as_millis() as u64)
                .query_async(&mut link.cmd),
        )
        .await?;
        if set.is_none() && !self.resync.swap(true, Relaxed) {
            tracing::warn!("presence: this node's liveness key expired (it was too slow); rewriting its presences");
        }
        let Some(sink) = self.sink() else {
            return Ok(());
        };
        let listed = read_nodes(link, names.nodes()).await?;
        let nodes = self.others(listed, &*sink);
        if nodes.is_empty() {
            return Ok(());
        }
        let mut pipe = ::redis::pipe();
        for n in &nodes {
            pipe.cmd("EXISTS").arg(names.alive(&node_hex(*n)));
        }
        let alive: Vec<i64> = timed(pipe.query_async(&mut link.cmd)).await?;
        // A node must be seen missing for `grace` by this session: right
        // after Redis came back, a missing key may be a node still
        // reconnecting.
        let now = Instant::now();
        for (n, alive) in nodes.iter().zip(alive) {
            if alive == 1 {
                s.missing.remove(n);
                continue;
            }
            let since = *s.missing.entry(*n).or_insert(now);
            if now.duration_since(since) < self.timing.grace {
                continue;
            }
            let h = node_hex(*n);
            if names.cluster {
                s.missing.remove(n);
                if self.clean_sharded(link, s, *n).await? {
                    self.stats.owners_down.fetch_add(1, Relaxed);
                    tracing::info!(node = %h, "presence: node {h} is gone (no sign of life for {:?}); its presences leave", self.timing.grace);
                    sink.owner_down(*n);
                }
                continue;
            }
            let cleaned: i64 = timed(
                ::redis::cmd("EVALSHA")
                    .arg(&s.clean)
                    .arg(3)
                    .arg(format!("{PREFIX}a:{h}"))
                    .arg(format!("{PREFIX}t:{h}"))
                    .arg(format!("{PREFIX}nodes"))
                    .arg(&h)
                    .arg(PREFIX)
                    .arg(PREFIX)
                    .arg(wire::replace(*n, &[]))
                    .query_async(&mut link.cmd),
            )
            .await?;
            s.missing.remove(n);
            if cleaned == 1 {
                self.stats.owners_down.fetch_add(1, Relaxed);
                tracing::info!(node = %h, "presence: node {h} is gone (no sign of life for {:?}); its presences leave", self.timing.grace);
                sink.owner_down(*n);
            }
        }
        Ok(())
    }
}

/// The node ids in the Redis set at `key` (written as [`node_hex`];
/// members that are not one are skipped), each once.
async fn read_nodes(link: &mut Link, key: String) -> RResult<HashSet<u64>> {
    let listed: Vec<String> =
        timed(::redis::cmd("SMEMBERS").arg(key).query_async(&mut link.cmd)).await?;
    Ok(listed
        .iter()
        .filter_map(|h| u64::from_str_radix(h, 16).ok())
        .collect())
}
