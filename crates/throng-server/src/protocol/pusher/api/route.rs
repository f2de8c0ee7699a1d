//! The Pusher HTTP API's routes on the public port, decided from the head
//! alone where it can be: the path and method, then the signature
//! (`auth_key` names the app, whose id must be the path's; the version, the
//! timestamp within 600 s and `auth_signature`, Pusher's order and texts,
//! `throng_protocol::pusher::api_auth`), then the body's declared length
//! (413 past `--pusher-max-api-body-bytes`). Only then is the body read:
//! the request stays incomplete until all of it is here, and `body_md5`
//! is checked against it. A refusal before the body is whole closes the
//! connection once answered (its body is never read).
//!
//! The Python SDK 3.3.4 sends `POST /users/{id}/terminate_connections`
//! without `/apps/{id}` (its `pusher_client.py`): its app is the key's.

use std::borrow::Cow;

use throng_protocol::pusher::api_auth::ApiAuthError;
use throng_protocol::pusher::channels::{channel_query, channels_query, users_query};
use throng_protocol::pusher::presence::is_valid_user_id;
use throng_protocol::pusher::SignedQuery;

use super::super::apps::Apps;
use super::super::Open;
use super::{Ask, Request};
use crate::config::Config;
use crate::engine::http::{body_length, Head, Route};

/// What a path asks for: the app id it names (`None` on the Python SDK's
/// `/users/..`) and the call, with its index in the metrics' routes.
#[derive(Debug, PartialEq, Eq)]
enum Target<'p> {
    Events,
    Batch,
    Channels,
    Channel(Cow<'p, str>),
    Users(Cow<'p, str>),
    Terminate(Cow<'p, str>),
    UserEvents(Cow<'p, str>),
    /// Under `/apps/{id}/` but no route of the API.
    Unknown,
}

impl Target<'_> {
    /// Its index in `crate::metrics::PUSHER_API_ROUTES`.
    fn index(&self) -> usize {
        match self {
            Target::Events => 0,
            Target::Batch => 1,
            Target::Channels => 2,
            Target::Channel(_) => 3,
            Target::Users(_) => 4,
            Target::Terminate(_) => 5,
            Target::UserEvents(_) => 6,
            Target::Unknown => 7,
        }
    }

    /// The method it takes.
    fn method(&self) -> &'static str {
        match self {
            Target::Channels | Target::Channel(_) | Target::Users(_) => "GET",
            _ => "POST",
        }
    }
}

/// The app id and target of an API path; `None` when the path is not the
/// API's.
fn target(path: &str) -> Option<(Option<&str>, Target<'_>)> {
    if let Some(rest) = path.strip_prefix("/users/") {
        // The Python SDK's terminate_connections, and nothing else there.
        let user = rest.strip_suffix("/terminate_connections")?;
        return (!user.contains('/')).then(|| (None, Target::Terminate(decode(user))));
    }
    let rest = path.strip_prefix("/apps/")?;
    let (id, rest) = rest.split_once('/').unwrap_or((rest, ""));
    let segments: Vec<&str> = rest.split('/').collect();
    let t = match segments[..] {
        ["events"] => Target::Events,
        ["batch_events"] => Target::Batch,
        ["channels"] => Target::Channels,
        ["channels", c] if !c.is_empty() => Target::Channel(decode(c)),
        ["channels", c, "users"] if !c.is_empty() => Target::Users(decode(c)),
        ["users", u, "terminate_connections"] if !u.is_empty() => Target::Terminate(decode(u)),
        ["users", u, "events"] if !u.is_empty() => Target::UserEvents(decode(u)),
        _ => Target::Unknown,
    };
    Some((Some(id), t))
}

/// A path segment, percent-decoded (a channel name may come escaped).
fn decode(segment: &str) -> Cow<'_, str> {
    if !segment.contains('%') {
        return Cow::Borrowed(segment);
    }
    let b = segment.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_or(Cow::Borrowed(segment), Cow::Owned)
}

/// Pusher's route for a request on the public port, if it is the HTTP
/// API's (and a Pusher app is configured).
pub(crate) fn route(
    head: &Head<'_, '_>,
    config: &Config,
    apps: &Apps,
) -> Option<Route<Open, Request>> {
    if apps.is_empty() {
        return None;
    }
    let (path_id, target) = target(head.path)?;
    let route = target.index();
    let refuse = |status: u16, message: String| {
        let ask = Ask::Refused { status, message };
        let r = Request {
            route,
            keep_alive: false,
            ask,
        };
        Route::Request(head.data.len(), Box::new(r))
    };
    if target == Target::Unknown {
        let why = format!(
            "No such route: {} {}: see the Pusher HTTP API (POST /apps/ID/events, GET /apps/ID/channels, ...)",
            head.req.method.unwrap_or(""),
            head.path.chars().take(100).collect::<String>()
        );
        return Some(refuse(404, why));
    }
    let method = head.req.method.unwrap_or("");
    if method != target.method() {
        let why = format!("{method} is not allowed here: send {}", target.method());
        return Some(refuse(405, why));
    }
    let (app, query) = match signed(head, path_id, apps) {
        Ok(found) => found,
        Err((status, why)) => return Some(refuse(status, why)),
    };
    let max = config.pusher.max_api_body_bytes;
    let len = match body_length(head.req, usize::MAX) {
        Ok(n) if n > max => {
            let why = format!(
                "The body is {n} bytes, over this server's limit of {max} \
                 (--pusher-max-api-body-bytes): send fewer or smaller events"
            );
            return Some(refuse(413, why));
        }
        Ok(n) => n,
        Err(e) => return Some(refuse(e.status, e.body.trim_end().to_string())),
    };
    let Some(end) = head
        .head_len
        .checked_add(len)
        .filter(|&e| e <= head.data.len())
    else {
        return Some(Route::Incomplete);
    };
    let body = &head.data[head.head_len..end];
    if let Err(e) = query.verify_body(body) {
        return Some(refuse(e.status(), e.to_string()));
    }
    let ask = match ask(target, app, &query, body) {
        Ok(ask) => ask,
        Err(e) => return Some(refuse(e.status(), e.message().to_string())),
    };
    let r = Request {
        route,
        keep_alive: head.keep_alive,
        ask,
    };
    Some(Route::Request(end, Box::new(r)))
}

/// The app that signed the request, its signature checked, and the query;
/// or the refusal's status and text.
fn signed<'q>(
    head: &Head<'_, 'q>,
    path_id: Option<&str>,
    apps: &Apps,
) -> Result<(u16, SignedQuery<'q>), (u16, String)> {
    let auth = |e: ApiAuthError| (e.status(), e.to_string());
    let query = SignedQuery::parse(head.query).map_err(auth)?;
    let app = apps
        .by_key(query.auth_key().map_err(auth)?)
        .ok_or_else(|| auth(ApiAuthError::UnknownKey))?;
    let a = apps.get(app);
    if let Some(id) = path_id.filter(|id| *id != a.id) {
        let shown: String = id.chars().take(64).collect();
        return Err((
            404,
            format!(
                "The app {shown} could not be found: the path's app id must be the id of the \
                 app whose key signs the request"
            ),
        ));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let method = head.req.method.unwrap_or("");
    let secret = a.secret.as_bytes();
    match query.verify(method, head.path, secret, now) {
        Ok(()) => Ok((app, query)),
        // A client may have escaped the path it signed unescaped.
        Err(ApiAuthError::BadSignature { .. })
            if head.path.contains('%')
                && query
                    .verify(method, &decode(head.path), secret, now)
                    .is_ok() =>
        {
            Ok((app, query))
        }
        Err(e) => Err(auth(e)),
    }
}

/// What the call asks, its query read.
fn ask(
    target: Target<'_>,
    app: u16,
    query: &SignedQuery<'_>,
    body: &[u8],
) -> Result<Ask, throng_protocol::pusher::ApiError> {
    use throng_protocol::pusher::api_error::ApiError;
    let user_ok = |user: &str| {
        if is_valid_user_id(user) {
            Ok(())
        } else {
            Err(ApiError::BadRequest(
                "Invalid user id: 1 to 128 characters, no control characters".into(),
            ))
        }
    };
    Ok(match target {
        Target::Events => Ask::Events {
            app,
            body: body.to_vec(),
        },
        Target::Batch => Ask::Batch {
            app,
            body: body.to_vec(),
        },
        Target::Channels => {
            let q = channels_query(query.get("filter_by_prefix"), query.get("info"))?;
            Ask::Channels {
                app,
                prefix: q.prefix.map(str::to_owned),
                user_count: q.user_count,
            }
        }
        Target::Channel(channel) => {
            let (_, info) = channel_query(&channel, query.get("info"))?;
            Ask::Channel {
                app,
                channel: channel.into_owned(),
                info,
            }
        }
        Target::Users(channel) => {
            users_query(&channel)?;
            Ask::Users {
                app,
                channel: channel.into_owned(),
            }
        }
        Target::Terminate(user) => {
            user_ok(&user)?;
            Ask::Terminate {
                app,
                user: user.into_owned(),
            }
        }
        Target::UserEvents(user) => {
            user_ok(&user)?;
            Ask::UserEvents {
                app,
                user: user.into_owned(),
                body: body.to_vec(),
            }
        }
        Target::Unknown => return Err(ApiError::BadRequest("No such route".into())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_calls() {
        assert_eq!(target("/apps/1/events"), Some((Some("1"), Target::Events)));
        assert_eq!(
            target("/apps/1/channels/presence-a%40b/users"),
            Some((Some("1"), Target::Users("presence-a@b".into())))
        );
        assert_eq!(
            target("/users/u%207/terminate_connections"),
            Some((None, Target::Terminate("u 7".into())))
        );
        assert_eq!(
            target("/apps/1/users/7/events"),
            Some((Some("1"), Target::UserEvents("7".into())))
        );
        assert_eq!(target("/apps/1/nope"), Some((Some("1"), Target::Unknown)));
        assert_eq!(
            target("/apps/1/channels/"),
            Some((Some("1"), Target::Unknown))
        );
        assert_eq!(target("/users/7/events"), None);
        assert_eq!(target("/app/key"), None);
        assert_eq!(decode("a%2"), "a%2");
        assert_eq!(decode("%23server-to-user-1"), "#server-to-user-1");
    }
}
