//! The thread a Redis client lives on (the backplane's and the presence
//! store's alike): a single-threaded tokio runtime of its own, so the
//! shards never share an executor with Redis I/O. [`spawn`] starts it and
//! waits for the first session, so a wrong URL, password or certificate
//! fails the caller's start with the reason instead of its first publish.

use std::future::Future;

use crate::Error;

/// Starts thread `name`, runs `start` there until it has a session or
/// fails, and returns once it knows: `Ok` with the session's loop running
/// on, or the reason as [`Error::RedisConnect`] naming `shown` (the URL
/// with its password masked).
pub(crate) fn spawn<F, Fut, Run>(name: &str, shown: &str, start: F) -> Result<(), Error>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Run, String>>,
    Run: Future<Output = ()>,
{
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            rt.block_on(async move {
                match start().await {
                    Ok(run) => {
                        let _ = ready_tx.send(Ok(()));
                        run.await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(()),
        Ok(Err(reason)) => Err(Error::RedisConnect {
            url: shown.to_string(),
            reason,
        }),
        Err(_) => Err(Error::RedisConnect {
            url: shown.to_string(),
            reason: format!("the {name} thread ended"),
        }),
    }
}
