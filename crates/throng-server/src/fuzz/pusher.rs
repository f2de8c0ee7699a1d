//! `pusher_frame`: arbitrary bytes to the Pusher wire layer's parsers
//! (`throng_protocol::pusher`: client and server frames, the HTTP API's
//! bodies and query strings, channel names, `channel_data`, `user_data`,
//! connection URLs, socket ids, signatures). Asserts: no panic; a decoded
//! client frame re-encodes (with the client encoders) and decodes to the
//! same frame; a relayed client event decodes as a server frame.

use throng_protocol::pusher::api_auth::SignedQuery;
use throng_protocol::pusher::client::{self, ClientFrame};
use throng_protocol::pusher::trigger::{parse_batch, parse_events, Limits};
use throng_protocol::pusher::{connect, presence, server, signature, socket_id, ChannelType};

/// Re-encodes a client frame as a client would send it, checking the parts
/// a server reads next (channel, member, user, signature) on the way.
fn reencode(frame: &ClientFrame<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    match frame {
        ClientFrame::Ping => out.extend_from_slice(br#"{"event":"pusher:ping","data":{}}"#),
        ClientFrame::Pong => out.extend_from_slice(br#"{"event":"pusher:pong","data":{}}"#),
        ClientFrame::Subscribe(s) => {
            let _ = ChannelType::of(&s.channel);
            if let Some(cd) = &s.channel_data {
                let _ = presence::parse_channel_data(cd);
            }
            if let Some(auth) = &s.auth {
                let cd = s.channel_data.as_deref();
                let _ =
                    signature::verify_channel_auth("key", b"secret", "1.2", &s.channel, cd, auth);
            }
            client::encode_subscribe(
                &mut out,
                &s.channel,
                s.auth.as_deref(),
                s.channel_data.as_deref(),
            );
        }
        ClientFrame::Unsubscribe { channel } => client::encode_unsubscribe(&mut out, channel),
        ClientFrame::Signin { auth, user_data } => {
            let _ = presence::parse_user_data(user_data);
            let _ = signature::verify_user_auth("key", b"secret", "1.2", user_data, auth);
            client::encode_signin(&mut out, auth, user_data);
        }
        ClientFrame::ClientEvent(e) => {
            let mut relayed = Vec::new();
            let data = e.data.map(server::Data::from_json);
            server::event(&mut relayed, &e.event, &e.channel, data, Some("u"));
            server::decode(&relayed).expect("a relayed client event decodes");
            client::encode_client_event(&mut out, &e.event, &e.channel, e.data.unwrap_or("null"));
        }
    }
    out
}

/// The target: arbitrary bytes through every parser of the Pusher wire
/// layer.
pub fn pusher_frame(data: &[u8]) {
    for max in [0, 64, 10 * 1024] {
        if let Ok(frame) = client::decode(data, max) {
            let out = reencode(&frame);
            let back = client::decode(&out, usize::MAX).expect("a re-encoded frame decodes");
            assert_eq!(back, frame);
        }
    }
    let _ = server::decode(data);
    let _ = parse_events(data, &Limits::default());
    let _ = parse_batch(data, &Limits::default());
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(q) = SignedQuery::parse(text) {
            let _ = q.auth_key();
            let _ = q.verify("POST", "/apps/1/events", b"secret", 1_353_088_179);
            let _ = q.verify_body(data);
        }
        let (path, query) = text.split_once('?').unwrap_or((text, ""));
        let _ = connect::parse(path, query);
        let _ = ChannelType::of(text);
        let _ = presence::parse_channel_data(text);
        let _ = presence::parse_user_data(text);
        let _ = socket_id::SocketId::parse(text);
    }
}
