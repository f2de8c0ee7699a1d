//! [`Router`]: a session's commands on a Redis Cluster, each sent to the
//! master of its key's slot over one multiplexed connection per master.
//!
//! Why not the redis crate's `cluster_async`: it follows MOVED and ASK
//! itself but does not say when it did (the counters in `/metrics` need
//! to), and it refuses a pipeline whose commands span slots, where the
//! workers batch one command per topic; this router splits such a
//! pipeline per master and keeps the replies in order.
//!
//! - `MOVED`: the slot changed hands; the topology is read again and the
//!   command resent (a few times at most, then the error ends the session).
//! - `ASK`: the slot is being migrated; `ASKING` and the command go, as one
//!   pipeline, to the node named.
//! - `NOSCRIPT` (a promoted replica has not loaded the worker's scripts):
//!   `SCRIPT LOAD` is routed to every master and its source kept here, so
//!   the script is loaded there and the command resent.
//! - `TRYAGAIN`, `CLUSTERDOWN`: a short wait, the topology again, resend.
//! - A connection error: the session ends (the link rebuilds it).

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::{Arg, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

use super::{io_error, slot, Shared, Spec, STATS};
use crate::link::RResult;

/// Redirections followed for one command before giving up.
const MAX_REDIRECTS: usize = 5;

/// Commands of a session on a Redis Cluster. A clone shares the topology
/// and the masters' multiplexed connections (history's reads run on one).
#[derive(Clone)]
pub struct Router {
    spec: Arc<Spec>,
    topology: Shared,
    conns: HashMap<String, MultiplexedConnection>,
    /// Scripts loaded, by SHA1, to load them again where missing.
    scripts: HashMap<String, Vec<u8>>,
}

impl Router {
    /// Reads the topology and connects to every master.
    pub async fn connect(spec: Arc<Spec>) -> RResult<Router> {
        let t = spec.topology(None).await?;
        let mut conns = HashMap::new();
        for m in &t.masters {
            conns.insert(m.clone(), spec.connect(m).await?);
        }
        Ok(Router {
            spec,
            topology: Arc::new(std::sync::Mutex::new(t)),
            conns,
            scripts: HashMap::new(),
        })
    }

    /// The topology, shared with the session's subscriber.
    pub fn topology(&self) -> Shared {
        self.topology.clone()
    }

    /// The cluster's description.
    pub fn spec(&self) -> &Arc<Spec> {
        &self.spec
    }

    async fn conn(&mut self, addr: &str) -> RResult<MultiplexedConnection> {
        if let Some(c) = self.conns.get(addr) {
            return Ok(c.clone());
        }
        let c = self.spec.connect(addr).await?;
        self.conns.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// Reads the topology again (from a master already connected if one
    /// answers) and drops connections to nodes that are no longer masters.
    pub async fn refresh(&mut self) -> RResult<()> {
        let mut any = self.conns.values().next().cloned();
        let t = self.spec.topology(any.as_mut()).await?;
        self.conns.retain(|a, _| t.masters.contains(a));
        *self.topology.lock().unwrap_or_else(|e| e.into_inner()) = t;
        Ok(())
    }

    /// The master of `slot` (any master when `None`).
    fn addr_for(&self, slot: Option<u16>) -> RResult<String> {
        let t = self.topology.lock().unwrap_or_else(|e| e.into_inner());
        let addr = match slot {
            Some(s) => t.owner(s),
            None => t.masters.first().map(String::as_str),
        };
        addr.map(str::to_string)
            .ok_or_else(|| io_error("no master serves this slot (the cluster is incomplete)"))
    }

    /// One command, routed, following redirections.
    pub async fn query(&mut self, cmd: &Cmd) -> RResult<Value> {
        let (name, slot) = route_of(cmd);
        if name == "SCRIPT" && is_script_load(cmd) {
            return self.load_everywhere(cmd).await;
        }
        let mut last = None;
        for _ in 0..MAX_REDIRECTS {
            let addr = self.addr_for(slot)?;
            let mut c = self.conn(&addr).await?;
            let err = match c.send_packed_command(cmd).await.and_then(server_error) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            match err.kind() {
                ErrorKind::Moved => {
                    STATS.moved.fetch_add(1, Relaxed);
                    self.refresh().await?;
                }
                ErrorKind::Ask => {
                    STATS.ask.fetch_add(1, Relaxed);
                    let to = err
                        .redirect_node()
                        .map(|(a, _)| a.to_string())
                        .ok_or_else(|| io_error("ASK without a node"))?;
                    let mut c = self.conn(&to).await?;
                    let mut p = ::redis::pipe();
                    p.cmd("ASKING").ignore().add_command(cmd.clone());
                    let mut v: Vec<Value> = p.query_async(&mut c).await?;
                    return v.pop().ok_or_else(|| io_error("no reply after ASKING"));
                }
                ErrorKind::NoScriptError => {
                    let source = sha_of(cmd).and_then(|sha| self.scripts.get(&sha).cloned());
                    let Some(source) = source else {
                        return Err(err);
                    };
                    let _: String = ::redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(source)
                        .query_async(&mut c)
                        .await?;
                }
                ErrorKind::TryAgain | ErrorKind::ClusterDown => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    self.refresh().await?;
                }
                _ => return Err(err),
            }
            last = Some(err);
        }
        Err(last.unwrap_or_else(|| io_error("too many redirections")))
    }

    /// `SCRIPT LOAD` on every master; the source kept for NOSCRIPT.
    async fn load_everywhere(&mut self, cmd: &Cmd) -> RResult<Value> {
        let masters = self
            .topology
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .masters
            .clone();
        let mut sha = Value::Nil;
        for m in masters {
            let mut c = self.conn(&m).await?;
            sha = c.send_packed_command(cmd).await.and_then(server_error)?;
        }
        if let (Ok(h), Some(Arg::Simple(src))) = (
            ::redis::from_redis_value::<String>(&sha),
            cmd.args_iter().nth(2),
        ) {
            self.scripts.insert(h, src.to_vec());
        }
        Ok(sha)
    }

    /// A pipeline: a transaction goes whole to the master of its first
    /// key (its keys must share a slot); any other is split per master,
    /// the parts sent at once, the replies put back in order. A reply that
    /// is a redirection is followed for that command alone.
    pub async fn pipeline(
        &mut self,
        p: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RResult<Vec<Value>> {
        if p.is_transaction() {
            let slot = p.cmd_iter().find_map(|c| route_of(c).1);
            let mut last = None;
            for _ in 0..MAX_REDIRECTS {
                let mut c = self.conn(&self.addr_for(slot)?).await?;
                match c.req_packed_commands(p, offset, count).await {
                    Err(e) if e.kind() == ErrorKind::Moved => {
                        STATS.moved.fetch_add(1, Relaxed);
                        self.refresh().await?;
                        last = Some(e);
                    }
                    r => return r,
                }
            }
            return Err(last.unwrap_or_else(|| io_error("too many redirections")));
        }
        let cmds: Vec<&Cmd> = p.cmd_iter().collect();
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, c) in cmds.iter().enumerate() {
            let addr = self.addr_for(route_of(c).1)?;
            match groups.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((addr, vec![i])),
            }
        }
        let mut sends = Vec::with_capacity(groups.len());
        for (addr, idx) in &groups {
            let mut c = self.conn(addr).await?;
            let mut part = ::redis::pipe();
            for i in idx {
                part.add_command((*cmds[*i]).clone());
            }
            sends.push(async move { c.req_packed_commands(&part, 0, idx.len()).await });
        }
        let results = futures_util::future::join_all(sends).await;
        let mut out: Vec<Option<Value>> = vec![None; cmds.len()];
        for ((_, idx), r) in groups.iter().zip(results) {
            match r {
                Ok(values) => {
                    for (i, v) in idx.iter().zip(values) {
                        out[*i] = Some(v);
                    }
                }
                Err(e) if redirected(&e) => {} // each command again, below
                Err(e) => return Err(e),
            }
        }
        let mut replies = Vec::with_capacity(cmds.len());
        for (i, v) in out.into_iter().enumerate() {
            let v = match v {
                Some(Value::ServerError(e)) if redirected(&RedisError::from(e.clone())) => {
                    self.query(cmds[i]).await?
                }
                Some(v) => v,
                None => self.query(cmds[i]).await?,
            };
            replies.push(v);
        }
        Ok(replies.into_iter().skip(offset).take(count).collect())
    }

    /// PINGs every master connection, at once.
    pub async fn ping_all(&mut self) -> RResult<()> {
        let pings = self
            .conns
            .values()
            .cloned()
            .map(|mut c| async move { ::redis::cmd("PING").query_async::<()>(&mut c).await });
        futures_util::future::try_join_all(pings).await.map(|_| ())
    }
}

impl ConnectionLike for Router {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.query(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.pipeline(cmd, offset, count))
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// Whether `e` asks for the command to be sent elsewhere or again.
fn redirected(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Moved | ErrorKind::Ask | ErrorKind::NoScriptError | ErrorKind::TryAgain
    )
}

/// A reply that is an error, as an error.
fn server_error(v: Value) -> RResult<Value> {
    match v {
        Value::ServerError(e) => Err(e.into()),
        v => Ok(v),
    }
}

/// The command's name (upper case) and the slot of its key: the first
/// argument, the first key of EVAL/EVALSHA/FCALL, the MATCH pattern of a
/// SCAN (its hash tag names the slot); none for commands without a key.
fn route_of(cmd: &Cmd) -> (String, Option<u16>) {
    let mut args = cmd.args_iter().map(|a| match a {
        Arg::Simple(b) => b,
        Arg::Cursor => &b"0"[..],
    });
    let name = args
        .next()
        .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
        .unwrap_or_default();
    let key = match name.as_str() {
        "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" => {
            let _script = args.next();
            let keys: usize = args
                .next()
                .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
                .unwrap_or(0);
            if keys > 0 {
                args.next()
            } else {
                None
            }
        }
        "SCAN" => {
            let mut it = args.skip(1);
            let mut pattern = None;
            while let Some(a) = it.next() {
                if a.eq_ignore_ascii_case(b"MATCH") {
                    pattern = it.next();
                }
            }
            pattern
        }
        "PING" | "INFO" | "CLUSTER" | "SCRIPT" | "ASKING" => None,
        _ => args.next(),
    };
    (name, key.map(slot::slot))
}

fn is_script_load(cmd: &Cmd) -> bool {
    matches!(cmd.args_iter().nth(1), Some(Arg::Simple(a)) if a.eq_ignore_ascii_case(b"LOAD"))
}

fn sha_of(cmd: &Cmd) -> Option<String> {
    match cmd.args_iter().nth(1)? {
        Arg::Simple(s) => Some(String::from_utf8_lossy(s).into_owned()),
        Arg::Cursor => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_route_by_their_key() {
        let mut c = ::redis::cmd("SET");
        c.arg("foo").arg(1);
        assert_eq!(route_of(&c), ("SET".into(), Some(12182)));
        let mut c = ::redis::cmd("evalsha");
        c.arg("abc").arg(2).arg("{foo}:x").arg("{foo}:y");
        assert_eq!(route_of(&c).1, Some(12182));
        let mut c = ::redis::cmd("EVALSHA");
        c.arg("abc").arg(0);
        assert_eq!(route_of(&c).1, None);
        let mut c = ::redis::cmd("SCAN");
        c.arg(0).arg("MATCH").arg("x:{foo}:*").arg("COUNT").arg(10);
        assert_eq!(route_of(&c).1, Some(12182));
        assert_eq!(route_of(&::redis::cmd("PING")).1, None);
    }
}
