#!/usr/bin/env python3
"""Usage: scripts/auth-memory.py [N] [jwt|none]. Server RSS per authenticated idle joined socket: N sockets, each its own
user (JWT HS256), each joined to rooms:lobby. Prints bytes per socket from
the RSS slope between N/4 and N sockets."""
import base64, hashlib, hmac, json, os, socket, subprocess, sys, time
N = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
AUTH = sys.argv[2] if len(sys.argv) > 2 else "jwt"
BIN = os.environ.get("THRONG_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "throng"))
SECRET = b"s3cret-for-the-auth-memory-script"  # 32 bytes or more: the server refuses shorter
def b64(b): return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
def jwt(sub):
    h = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    p = b64(json.dumps({"sub": sub, "exp": int(time.time()) + 3600}).encode())
    sig = b64(hmac.new(SECRET, f"{h}.{p}".encode(), hashlib.sha256).digest())
    return f"{h}.{p}.{sig}"
args = [BIN, "serve", "--port", "0", "--bind", "127.0.0.1", "--idle-timeout", "0", "--api-bind", "none", "--shards", "1"]
if AUTH == "jwt":
    args += ["--auth", "jwt", "--auth-jwt-secret", SECRET.decode()]
srv = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
port = None
for line in srv.stdout:
    if line.startswith("listening on"):
        port = int(line.strip().rsplit(":", 1)[1]); break
def rss():
    with open(f"/proc/{srv.pid}/statm") as f: return int(f.read().split()[1]) * 4096
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (19500, 19500))
socks = []
def connect(i):
    s = socket.create_connection(("127.0.0.1", port))
    q = f"/socket/websocket?vsn=2.0.0" + (f"&token={jwt(f'user{i}')}" if AUTH == "jwt" else "")
    s.sendall((f"GET {q} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf: buf += s.recv(4096)
    assert b" 101 " in buf.split(b"\r\n")[0], buf[:80]
    msg = json.dumps(["1", "1", "rooms:lobby", "phx_join", {}]).encode()
    mask = b"\x01\x02\x03\x04"
    hdr = bytes([0x81, 0x80 | len(msg)]) if len(msg) < 126 else bytes([0x81, 0x80 | 126]) + len(msg).to_bytes(2, "big")
    s.sendall(hdr + mask + bytes(b ^ mask[j % 4] for j, b in enumerate(msg)))
    r = s.recv(4096)
    assert b'"ok"' in r, r
    socks.append(s)
q = N // 4
for i in range(q): connect(i)
time.sleep(1); r1 = rss()
for i in range(q, N): connect(i)
time.sleep(1); r2 = rss()
print(f"{AUTH}: {(r2 - r1) / (N - q):.0f} B per socket ({N} sockets, RSS {r2/1e6:.1f} MB)")
srv.kill()
