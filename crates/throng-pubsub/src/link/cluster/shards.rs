//! [`Shards`]: a session's sharded pub/sub on a Redis Cluster: one
//! subscribing connection per shard (the master serving the channel's
//! slot), opened on the first channel there, carrying every channel of
//! that shard (SSUBSCRIBE), whatever their number.
//!
//! Why our own per-shard connections rather than the redis crate's
//! cluster connection: that one subscribes over the same connections as
//! its commands and does not tell when a shard ended a subscription
//! itself; here each shard's connection is a RESP3 connection of the
//! crate whose push messages (`smessage`, `sunsubscribe`, the
//! disconnection) all arrive, tagged with the connection, on one queue
//! this session reads, so nothing a shard says is missed:
//!
//! - `smessage`: a message, handed to the worker;
//! - `sunsubscribe` for a channel still wanted on that connection: the
//!   shard gave up the channel's slot (a migration); the topology is read
//!   again and the channel subscribed at its new owner (counted);
//! - the connection closed (a master failed): the session ends and the
//!   link rebuilds it on the new topology (counted), subscribing again.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use ::redis::aio::MultiplexedConnection;
use ::redis::{ErrorKind, PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::{io_error, slot, Shared, Spec, STATS};
use crate::link::{within, RResult};

/// Redirections followed for one SSUBSCRIBE before giving up.
const MAX_REDIRECTS: usize = 5;

/// The receiving side: the pushes of every shard connection.
pub struct Shards {
    rx: mpsc::UnboundedReceiver<(u64, PushInfo)>,
    handle: ShardsHandle,
}

/// The commanding side (SSUBSCRIBE, SUNSUBSCRIBE, PING); cheap to clone.
#[derive(Clone)]
pub struct ShardsHandle {
    inner: Arc<Inner>,
}

struct Inner {
    spec: Arc<Spec>,
    topology: Shared,
    tx: mpsc::UnboundedSender<(u64, PushInfo)>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Per shard address: the connection and its id (in pushes).
    conns: HashMap<String, (u64, MultiplexedConnection)>,
    /// Each wanted channel, and the id of the connection it is on.
    channels: HashMap<String, u64>,
    next_id: u64,
}

impl Shards {
    pub fn new(spec: Arc<Spec>, topology: Shared) -> Shards {
        let (tx, rx) = mpsc::unbounded_channel();
        Shards {
            rx,
            handle: ShardsHandle {
                inner: Arc::new(Inner {
                    spec,
                    topology,
                    tx,
                    state: Mutex::new(State::default()),
                }),
            },
        }
    }

    pub fn handle(&self) -> ShardsHandle {
        self.handle.clone()
    }

    /// The next message on a subscribed channel. Resubscribes channels a
    /// shard dropped; an error once a shard's connection is lost.
    pub async fn next_message(&mut self) -> RResult<::redis::Msg> {
        loop {
            let Some((id, info)) = self.rx.recv().await else {
                return Err(io_error("the sharded subscriber closed"));
            };
            match info.kind {
                PushKind::SMessage | PushKind::Message => {
                    if let Some(m) = ::redis::Msg::from_push_info(info) {
                        return Ok(m);
                    }
                }
                PushKind::Disconnection if self.handle.forget_conn(id) => {
                    STATS.shard_lost.fetch_add(1, Relaxed);
                    return Err(io_error(
                        "a Redis Cluster shard's connection closed (failover or restart)",
                    ));
                }
                PushKind::SUnsubscribe => {
                    let Some(channel) = info
                        .data
                        .first()
                        .and_then(|v| ::redis::from_redis_value::<String>(v).ok())
                    else {
                        continue;
                    };
                    if self.handle.dropped_by_shard(&channel, id) {
                        STATS.resubscribed.fetch_add(1, Relaxed);
                        tracing::info!(
                            channel,
                            "Redis Cluster: a shard ended a subscription (its slot migrated); \
                             subscribing at the slot's new owner"
                        );
                        self.handle.refresh().await?;
                        self.handle.subscribe(&channel).await?;
                    }
                }
                _ => {}
            }
        }
    }
}

impl ShardsHandle {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `channel` is wanted on connection `id`, i.e. a
    /// `sunsubscribe` from there was the shard's doing; then forgets where.
    fn dropped_by_shard(&self, channel: &str, id: u64) -> bool {
        let mut st = self.state();
        if st.channels.get(channel) == Some(&id) {
            st.channels.remove(channel);
            true
        } else {
            false
        }
    }

    /// Forgets connection `id`; whether it was a current one.
    fn forget_conn(&self, id: u64) -> bool {
        let mut st = self.state();
        let before = st.conns.len();
        st.conns.retain(|_, (i, _)| *i != id);
        before != st.conns.len()
    }

    /// Reads the topology again.
    pub async fn refresh(&self) -> RResult<()> {
        let t = self.inner.spec.topology(None).await?;
        *self
            .inner
            .topology
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = t;
        Ok(())
    }

    /// The subscribing connection to shard `addr`, opened if needed.
    async fn conn(&self, addr: &str) -> RResult<(u64, MultiplexedConnection)> {
        if let Some(c) = self.state().conns.get(addr) {
            return Ok(c.clone());
        }
        let id = {
            let mut st = self.state();
            st.next_id += 1;
            st.next_id
        };
        let client = self
            .inner
            .spec
            .client(addr, true)
            .map_err(|e| io_error(&e.to_string()))?;
        let tx = self.inner.tx.clone();
        let limit = self.inner.spec.timeout();
        let config = ::redis::AsyncConnectionConfig::new()
            .set_connection_timeout(limit)
            .set_response_timeout(limit)
            .set_push_sender(move |info: PushInfo| tx.send((id, info)).map_err(|_| ()));
        let c = within(
            limit,
            "no connection",
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await?;
        let mut st = self.state();
        // Another subscribe may have opened one meanwhile: keep the first.
        let entry = st.conns.entry(addr.to_string()).or_insert((id, c));
        Ok(entry.clone())
    }

    /// SSUBSCRIBEs `channel` at the master of its slot, following MOVED.
    pub async fn subscribe(&self, channel: &str) -> RResult<()> {
        let slot = slot::slot(channel.as_bytes());
        let mut last = None;
        for _ in 0..MAX_REDIRECTS {
            let owner = self
                .inner
                .topology
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .owner(slot)
                .map(str::to_string);
            let Some(addr) = owner else {
                return Err(io_error(
                    "no master serves this slot (the cluster is incomplete)",
                ));
            };
            let (id, mut c) = self.conn(&addr).await?;
            self.state().channels.insert(channel.to_string(), id);
            let sent = ::redis::cmd("SSUBSCRIBE")
                .arg(channel)
                .query_async::<Value>(&mut c)
                .await;
            match sent {
                Ok(Value::ServerError(e)) => last = Some(e.into()),
                Ok(_) => return Ok(()),
                Err(e) => last = Some(e),
            }
            let e: &::redis::RedisError = last.as_ref().expect("set above");
            if e.kind() != ErrorKind::Moved {
                self.state().channels.remove(channel);
                return Err(last.expect("set above"));
            }
            STATS.moved.fetch_add(1, Relaxed);
            self.state().channels.remove(channel);
            self.refresh().await?;
        }
        Err(last.unwrap_or_else(|| io_error("too many redirections")))
    }

    /// SUNSUBSCRIBEs `channel` where it is.
    pub async fn unsubscribe(&self, channel: &str) -> RResult<()> {
        let conn = {
            let mut st = self.state();
            let Some(id) = st.channels.remove(channel) else {
                return Ok(());
            };
            st.conns.values().find(|(i, _)| *i == id).cloned()
        };
        if let Some((_, mut c)) = conn {
            // Unsubscribing a channel whose slot moved meanwhile is answered
            // MOVED: it is not subscribed there any more either way.
            let _ = ::redis::cmd("SUNSUBSCRIBE")
                .arg(channel)
                .query_async::<Value>(&mut c)
                .await?;
        }
        Ok(())
    }

    /// PINGs every shard connection, at once.
    pub async fn ping(&self) -> RResult<()> {
        let conns: Vec<MultiplexedConnection> = self
            .state()
            .conns
            .values()
            .map(|(_, c)| c.clone())
            .collect();
        let pings = conns
            .into_iter()
            .map(|mut c| async move { ::redis::cmd("PING").query_async::<Value>(&mut c).await });
        futures_util::future::try_join_all(pings).await.map(|_| ())
    }
}
