"""What the official `pusher` Python SDK computes and sends, for
tests/pusher/vectors.mjs: channel and user signatures, webhook signatures,
its validation of throng's webhook, and (against a capture server on
127.0.0.1:PORT) every HTTP API request it signs.

    sdk_vectors.py PORT TIMESTAMP KEY SECRET SERVER_FRAMES_JSON

Prints one JSON object. The SDK's clock is pinned to TIMESTAMP so its
signatures are the same on every run."""
import json
import sys
import time

import pusher
from pusher.signature import sign

port, ts, key, secret, frames_path = sys.argv[1:6]
ts = int(ts)
time.time = lambda: ts

client = pusher.Pusher(app_id="3", key=key, secret=secret, host="127.0.0.1", port=int(port), ssl=False,
                       encryption_master_key_base64="BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=")

channel_auth = []
for socket_id, channel, data in [
    ("1234.1234", "private-foobar", None),
    ("1234.1234", "presence-foobar", {"user_id": 10, "user_info": {"name": "Mr. Channels"}}),
    ("123.456", "presence-room", {"user_id": "ü \"3\"", "user_info": {"name": "Zoë"}}),
    ("123.456", "private-encrypted-secrets", None),
    ("123.456", "private-cache-chat", None),
]:
    auth = client.authenticate(channel=channel, socket_id=socket_id, custom_data=data)
    channel_auth.append({"socket_id": socket_id, "channel": channel,
                         "channel_data": auth.get("channel_data"), "auth": auth["auth"]})

user_auth = []
for socket_id, user in [("1234.1234", {"id": "12345"}), ("123.456", {"id": "u-1", "name": "Ann", "watchlist": ["u-2"]})]:
    auth = client.authenticate_user(socket_id, user)
    user_auth.append({"socket_id": socket_id, "user_data": auth["user_data"], "auth": auth["auth"], "id": user["id"]})

webhooks = []
for body in ['{"time_ms":%d000,"events":[{"name":"channel_occupied","channel":"a"}]}' % ts,
             '{"time_ms": %d000, "events": [{"name": "member_added", "channel": "presence-ü", "user_id": "1"}]}' % ts]:
    webhooks.append({"body": body, "signature": sign(secret, body)})

with open(frames_path, encoding="utf-8") as f:
    hook = json.load(f)["webhook"]
time.time = lambda: hook["time_ms"] / 1000
validated = client.validate_webhook(key=hook["key"], signature=hook["signature"], body=hook["body"])
tampered = client.validate_webhook(key=hook["key"], signature=hook["signature"], body=hook["body"] + " ")
time.time = lambda: ts

client.trigger(["my-channel", "private-chat"], "new-message", {"text": "hi ü \"you\"", "n": 1}, socket_id="123.456")
client.trigger("presence-room", "plain", "just text")
client.trigger_batch([{"channel": "my-channel", "name": "e1", "data": {"a": 1}},
                      {"channel": "presence-room", "name": "e2", "data": "x", "socket_id": "1.2"}])
client.channels_info(prefix_filter="presence-", attributes=["user_count"])
client.channels_info()
client.channel_info("presence-room", ["user_count", "subscription_count"])
client.channel_info("my-channel", ["subscription_count"])
client.users_info("presence-room")
client.terminate_user_connections("u-1")
client.send_to_user("12345", "hello", {"a": 1})

json.dump({"channel_auth": channel_auth, "user_auth": user_auth, "webhooks": webhooks,
           "validated_webhook": validated, "tampered_webhook": tampered}, sys.stdout, ensure_ascii=False)
