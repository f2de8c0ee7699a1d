"""Calls of the official `pusher` Python SDK against a running throng, for
tests/e2e/pusher_api.test.mjs: each argument after the app's is one call,
as JSON `[method, args...]`, made in order.

    sdk_calls.py PORT APP_ID KEY SECRET CALL...

Prints one JSON list: per call `{"ok": result}`, or `{"error": class name,
"message": text}` when the SDK raised."""
import json
import sys

import pusher

port, app_id, key, secret = sys.argv[1:5]
client = pusher.Pusher(app_id=app_id, key=key, secret=secret, host="127.0.0.1", port=int(port), ssl=False,
                       timeout=10)

out = []
for raw in sys.argv[5:]:
    method, *args = json.loads(raw)
    try:
        out.append({"ok": getattr(client, method)(*args)})
    except Exception as e:  # what the SDK raised, for the test to check
        out.append({"error": type(e).__name__, "message": str(e)})
print(json.dumps(out))
