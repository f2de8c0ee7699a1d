//! The crate's one error type.

/// Why a bench, an agent or a scenario could not go on.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("scenario: {0}")]
    Scenario(String),
    /// A flag's value out of its bounds, or a file it names unreadable.
    #[error("{0}")]
    Usage(String),
    #[error("tsung config: {0}")]
    Tsung(String),
    #[error("controller protocol: {0}")]
    Protocol(String),
    #[error("server: {0}")]
    Server(String),
    #[error("{0}")]
    Limit(String),
    /// The run ran, and failed its own success criteria (every user joined,
    /// no error, every broadcast sent): the report says more.
    #[error("the run failed: {0} (see the report above)")]
    Failed(String),
    /// A step of moving the run into its own network namespace failed.
    #[error("network namespace: {step}: {source}")]
    Netns {
        step: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}
