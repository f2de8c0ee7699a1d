#!/usr/bin/env python3
"""A trivial app backend for the --hook-events runs: answers 200 {} to every POST
(URL/events batches) and counts the events it took."""
import json, sys
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

taken = 0

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        global taken
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path.endswith("/events"):
            try:
                taken += len(json.loads(body))
            except Exception:
                pass
        out = b"{}"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def do_GET(self):
        out = str(taken).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
