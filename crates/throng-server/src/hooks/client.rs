//! The hook client: requests to the app backend go out on a hyper client
//! (HTTP/1.1, keep-alive pool) on one tokio thread of its own, so a slow or
//! dead backend never holds an event loop. A call is refused at once, with
//! no request, when the circuit is open or `--hook-max-in-flight` requests
//! are out; otherwise its answer, checked here, goes back to the calling
//! shard's inbox as a [`HookAnswer`].

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::answer::Answer;
use super::breaker::Breaker;
use super::events::Events;
use super::request::signature;
use super::stats::{self, HookStats};
use super::{Failure, Hook, HooksConfig};

/// What a hook call came to, for the shard that made it.
#[derive(Debug)]
pub enum Outcome {
    Answer(Answer),
    Failed(Failure),
    /// A connect the backend refused with 401 or 403, with the reason its
    /// body gave (`answer::reason_text`; empty when it gave none).
    Refused(String),
}

/// The answer to call `id` of a shard.
#[derive(Debug)]
pub struct HookAnswer {
    pub id: u64,
    pub outcome: Outcome,
}

/// Where the answers go: the node, to the calling shard's inbox
/// (`crate::node` implements it: the node is above the hooks it holds).
pub(crate) trait Answers: Send + Sync {
    /// Queues `answer` in shard `shard`'s inbox.
    fn hook_answer(&self, shard: usize, answer: HookAnswer);
}

pub struct HookClient {
    config: HooksConfig,
    /// `{url}/join`, `{url}/push`, `{url}/connect`, by [`Hook`] index.
    uris: [hyper::Uri; 3],
    client: Http,
    runtime: tokio::runtime::Handle,
    in_flight: AtomicUsize,
    breaker: Breaker,
    stats: [HookStats; 3],
    /// Where answers go: the shards' inboxes.
    node: OnceLock<Weak<dyn Answers>>,
    /// The backend's failure was logged (once per episode: until it answers).
    down_logged: AtomicBool,
    /// A bad answer was logged (once per episode: until a good one).
    bad_logged: AtomicBool,
    /// The lifecycle events' queue, with `events = true`.
    events: Option<Arc<Events>>,
}

/// Idle keep-alive connections kept to the backend.
const POOL_IDLE: usize = 256;

/// The HTTP client requests to backends go out on (the hooks', Pusher's
/// webhooks): HTTP/1.1, https with the roots of `ca_file` (or the
/// system's), a keep-alive pool.
pub(super) type Http = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A tokio runtime on a thread of its own named `name`, for a client's
/// requests: nothing a backend does holds an event loop.
pub(super) fn runtime(name: &str) -> io::Result<tokio::runtime::Handle> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    let _ = tx.send(Ok(rt.handle().clone()));
                    rt.block_on(std::future::pending::<()>());
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        })?;
    rx.recv()
        .map_err(|_| io::Error::other(format!("the {name} thread did not start")))?
}

/// An [`Http`] client whose connects give up after `timeout`.
pub(super) fn http_client(
    timeout: Duration,
    idle_timeout: Duration,
    ca_file: Option<&std::path::Path>,
) -> io::Result<Http> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(timeout));
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(super::tls::client_config(ca_file)?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    // The pool's idle timeout takes effect only with a timer: without
    // one, idle connections were closed only when next checked out, so
    // after a burst up to POOL_IDLE of them stayed open for good.
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(idle_timeout)
        .pool_timer(TokioTimer::new())
        .pool_max_idle_per_host(POOL_IDLE)
        .build(connector))
}

impl HookClient {
    /// Starts the hook thread when a backend is configured.
    pub fn start(config: &HooksConfig) -> io::Result<Option<Arc<HookClient>>> {
        let Some(url) = &config.url else {
            return Ok(None);
        };
        let uri = |hook: Hook| {
            format!("{url}/{}", hook.name())
                .parse::<hyper::Uri>()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
        };
        let uris = [uri(Hook::Join)?, uri(Hook::Push)?, uri(Hook::Connect)?];
        let runtime = runtime("throng-hooks")?;
        let client = http_client(
            config.timeout,
            config.idle_timeout,
            config.ca_file.as_deref(),
        )?;
        let events = config.events.then(|| -> io::Result<Arc<Events>> {
            let target = super::events::Target {
                client: client.clone(),
                uri: format!("{url}/events")
                    .parse()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
                timeout: config.timeout,
                batch: config.events_batch,
            };
            let secret = config.secret.clone();
            Ok(Events::start(&runtime, config.events_queue, target, secret))
        });
        let events = events.transpose()?;
        Ok(Some(Arc::new(HookClient {
            config: config.clone(),
            uris,
            client,
            runtime,
            in_flight: AtomicUsize::new(0),
            breaker: Breaker::new(config.breaker_failures),
            stats: Default::default(),
            node: OnceLock::new(),
            down_logged: AtomicBool::new(false),
            bad_logged: AtomicBool::new(false),
            events,
        })))
    }

    /// Answers go to this node's shards.
    pub(crate) fn attach(&self, node: Weak<dyn Answers>) {
        let _ = self.node.set(node);
    }

    /// The lifecycle events' queue, when `events = true`.
    pub fn events(&self) -> Option<&Events> {
        self.events.as_deref()
    }

    /// The settings it runs with.
    pub fn config(&self) -> &HooksConfig {
        &self.config
    }

    /// Counts a call refused before it reached the client (a socket's bound).
    pub(crate) fn refused(&self, hook: Hook) {
        self.stats[hook.index()].refused.fetch_add(1, Relaxed);
    }

    /// Sends `body` to the `hook` path; the answer goes to `shard`'s inbox
    /// as call `id`. `Err`: refused at once (circuit open, process bound).
    pub(crate) fn call(
        self: &Arc<Self>,
        hook: Hook,
        shard: usize,
        id: u64,
        body: Vec<u8>,
    ) -> Result<(), Failure> {
        let stats = &self.stats[hook.index()];
        if self.in_flight.fetch_add(1, Relaxed) >= self.config.max_in_flight {
            self.in_flight.fetch_sub(1, Relaxed);
            stats.refused.fetch_add(1, Relaxed);
            return Err(Failure::Busy);
        }
        if !self.breaker.allow() {
            self.in_flight.fetch_sub(1, Relaxed);
            stats.refused.fetch_add(1, Relaxed);
            return Err(Failure::Unavailable);
        }
        stats.requests.fetch_add(1, Relaxed);
        let this = Arc::clone(self);
        self.runtime.spawn(async move {
            let outcome = this.exchange(hook, body).await;
            this.in_flight.fetch_sub(1, Relaxed);
            if let Some(node) = this.node.get().and_then(Weak::upgrade) {
                node.hook_answer(shard, HookAnswer { id, outcome });
            }
        });
        Ok(())
    }

    /// One request and its answer, checked; updates the breaker and counters.
    async fn exchange(&self, hook: Hook, body: Vec<u8>) -> Outcome {
        let stats = &self.stats[hook.index()];
        let mut req = hyper::Request::post(self.uris[hook.index()].clone())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::USER_AGENT, "throng");
        if let Some(secret) = &self.config.secret {
            req = req.header("x-throng-signature", signature(secret, &body));
        }
        let req = match req.body(Full::new(Bytes::from(body))) {
            Ok(r) => r,
            Err(e) => return self.bad(hook, format_args!("request not built: {e}")),
        };
        let started = Instant::now();
        let max = self.config.max_answer_bytes;
        let exchange = async {
            let resp = self.client.request(req).await.map_err(|e| {
                use std::error::Error;
                match e.source() {
                    Some(cause) => format!("{e}: {cause}"),
                    None => e.to_string(),
                }
            })?;
            let status = resp.status();
            match Limited::new(resp.into_body(), max).collect().await {
                Ok(b) => Ok((status, Some(b.to_bytes()))),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => Ok((status, None)),
                Err(e) => Err(format!("answer cut: {e}")),
            }
        };
        let (status, body) = match tokio::time::timeout(self.config.timeout, exchange).await {
            Err(_) => {
                stats.timeouts.fetch_add(1, Relaxed);
                let ms = self.config.timeout.as_millis();
                let why = format_args!("no answer within {ms} ms (--hook-timeout-ms)");
                return self.down(hook, Failure::Timeout, why);
            }
            Ok(Err(e)) => {
                return self.down(hook, Failure::Unavailable, format_args!("unreachable: {e}"))
            }
            Ok(Ok(answer)) => answer,
        };
        stats.observe(started.elapsed());
        if status.is_server_error() {
            return self.down(
                hook,
                Failure::Unavailable,
                format_args!("answered {status}"),
            );
        }
        if self.breaker.success() {
            tracing::info!(
                hook = hook.name(),
                "the app backend answers again: hook circuit closed"
            );
        }
        self.down_logged.store(false, Relaxed);
        let refusal =
            status == hyper::StatusCode::UNAUTHORIZED || status == hyper::StatusCode::FORBIDDEN;
        if hook == Hook::Connect && refusal {
            let reason = body.as_deref().map(super::answer::reason_text);
            return Outcome::Refused(reason.unwrap_or_default());
        }
        let Some(body) = body else {
            return self.bad(
                hook,
                format_args!("answer over {max} bytes (--hook-max-answer-bytes)"),
            );
        };
        if !status.is_success() {
            return self.bad(
                hook,
                format_args!("answered {status}, want 2xx with a JSON body"),
            );
        }
        match Answer::parse(&body) {
            Ok(a) => {
                self.bad_logged.store(false, Relaxed);
                Outcome::Answer(a)
            }
            Err(e) => self.bad(hook, format_args!("answer not understood: {e}")),
        }
    }

    /// The backend failed (unreachable, timeout, 5xx).
    fn down(&self, hook: Hook, f: Failure, why: std::fmt::Arguments<'_>) -> Outcome {
        self.stats[hook.index()].errors.fetch_add(1, Relaxed);
        let opened = self.breaker.failure();
        if !self.down_logged.swap(true, Relaxed) {
            tracing::warn!(
                hook = hook.name(),
                "the app backend at {} failed: {why}; clients get {} (counted in throng_hook_errors_total; logged once until it answers)",
                self.config.url.as_deref().unwrap_or(""),
                f.reply()
            );
        }
        if opened {
            tracing::warn!(
                hook = hook.name(),
                "{} failures in a row: hook circuit open, joins and pushes answered {} at once; probing the backend every {} ms",
                self.config.breaker_failures,
                Failure::Unavailable.reply(),
                super::breaker::OPEN_FOR_MS
            );
        }
        Outcome::Failed(f)
    }

    /// The backend answered, but not as the contract says.
    fn bad(&self, hook: Hook, why: std::fmt::Arguments<'_>) -> Outcome {
        let s = &self.stats[hook.index()];
        s.errors.fetch_add(1, Relaxed);
        s.bad_answers.fetch_add(1, Relaxed);
        if !self.bad_logged.swap(true, Relaxed) {
            tracing::warn!(
                hook = hook.name(),
                "bad answer from the app backend's {} hook: {why}; the client gets {} (counted in throng_hook_bad_answers_total; logged once until a good answer). Fix: answer 2xx with a JSON object as docs/hooks.md shows",
                hook.name(),
                Failure::BadAnswer.reply()
            );
        }
        Outcome::Failed(Failure::BadAnswer)
    }

    /// Hands the hooks' metrics to `out`.
    pub fn describe(&self, out: &mut dyn throng_pubsub::metrics::Sink) {
        stats::describe(
            out,
            &self.stats,
            self.breaker.state() as u8,
            self.in_flight.load(Relaxed),
        );
        if let Some(events) = &self.events {
            events.describe(out);
        }
    }
}
