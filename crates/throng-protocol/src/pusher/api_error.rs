//! A refused HTTP API request (other than its signature, [`super::api_auth`]):
//! the status Pusher answers with and a message that says what to change.
//! Pusher's HTTP API reference: 400 for a bad request ("details in response
//! body"), 413 for event data over the size limit.

/// A refused HTTP API request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed or asks for something not allowed.
    #[error("{0}")]
    BadRequest(String),
    /// 413: an event's data is over the app's limit.
    #[error("{0}")]
    TooLarge(String),
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::BadRequest(_) => 400,
            ApiError::TooLarge(_) => 413,
        }
    }

    /// The message for the response body.
    pub fn message(&self) -> &str {
        match self {
            ApiError::BadRequest(m) | ApiError::TooLarge(m) => m,
        }
    }

    /// The same error with `context` in front (`batch[3]: ...`).
    pub(crate) fn within(self, context: &str) -> ApiError {
        match self {
            ApiError::BadRequest(m) => ApiError::BadRequest(format!("{context}: {m}")),
            ApiError::TooLarge(m) => ApiError::TooLarge(format!("{context}: {m}")),
        }
    }
}

/// A 400 with `message`.
pub(crate) fn bad(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_context() {
        assert_eq!(bad("x").status(), 400);
        let e = ApiError::TooLarge("big".into()).within("batch[2]");
        assert_eq!((e.status(), e.message()), (413, "batch[2]: big"));
    }
}
