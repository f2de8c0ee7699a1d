// GET /healthz and GET /readyz on the public port and on the server API
// listener: 200 normally; /readyz 503 {"reason":"draining"} once SIGTERM starts
// a drain. (The Redis case is tests/cluster/health.test.mjs.)
import {test} from "node:test"
import assert from "node:assert/strict"
import net from "node:net"
import {randomBytes} from "node:crypto"
import {startServer, httpRequest, handshakeRequest, withTimeout} from "./helpers.mjs"

const T = {timeout: 30000}

const json = res => JSON.parse(res.body.toString("utf8"))

test("healthz and readyz answer 200 on both listeners, without an API key", T, async () => {
  const server = await startServer(["--api-bind", "127.0.0.1:0", "--api-key", "k3y-of-16-bytes-or-more"])
  try {
    for(const port of [server.port, server.apiPort]){
      const h = await httpRequest(port, "GET", "/healthz")
      assert.equal(h.status, 200, `healthz on ${port}`)
      assert.match(h.headers["content-type"], /^application\/json/)
      assert.deepEqual(json(h), {status: "alive"})
      const r = await httpRequest(port, "GET", "/readyz")
      assert.equal(r.status, 200, `readyz on ${port}: ${r.body}`)
      assert.deepEqual(json(r), {status: "ready"})
      assert.equal(r.headers["cache-control"], "no-store")
    }
    const head = await httpRequest(server.port, "HEAD", "/readyz")
    assert.equal(head.status, 200)
    const m = await httpRequest(server.apiPort, "GET", "/metrics")
    assert.match(m.body.toString(), /^throng_ready 1$/m)
    assert.match(m.body.toString(), /^throng_draining 0$/m)
  } finally {
    await server.stop()
  }
})

test("readyz answers 503 draining on the API listener while a SIGTERM drain runs", T, async () => {
  const server = await startServer(["--api-bind", "127.0.0.1:0", "--drain-seconds", "30"])
  // A WebSocket that never answers the server's close (half-open: it does not
  // send its FIN when the server sends its own), so the drain waits the close
  // linger for it and the process stays up a few seconds.
  const sock = net.connect({port: server.port, host: "127.0.0.1", allowHalfOpen: true})
  sock.on("error", () => {})
  let got = ""
  sock.setEncoding("latin1")
  const upgraded = new Promise(resolve => sock.on("data", d => { got += d; if(got.includes("\r\n\r\n")){ resolve() } }))
  await withTimeout(new Promise(resolve => sock.once("connect", resolve)), 5000, "connect")
  sock.write(handshakeRequest({port: server.port, key: randomBytes(16).toString("base64")}))
  await withTimeout(upgraded, 5000, "the 101")
  assert.match(got, /^HTTP\/1\.1 101/)
  try {
    server.proc.kill("SIGTERM")
    let last
    const deadline = Date.now() + 10000
    while(Date.now() < deadline){
      last = await httpRequest(server.apiPort, "GET", "/readyz")
      if(last.status === 503){ break }
      await new Promise(resolve => setTimeout(resolve, 20))
    }
    assert.equal(last.status, 503, `readyz during the drain: ${last.body}`)
    const body = json(last)
    assert.equal(body.status, "not ready")
    assert.equal(body.reason, "draining")
    assert.match(body.message, /draining/)
    // Alive all the same.
    assert.equal((await httpRequest(server.apiPort, "GET", "/healthz")).status, 200)
    const m = await httpRequest(server.apiPort, "GET", "/metrics")
    assert.match(m.body.toString(), /^throng_ready 0$/m)
    assert.match(m.body.toString(), /^throng_draining 1$/m)
  } finally {
    // The drain ends by itself (a second SIGTERM would exit at once, with 1).
    sock.destroy()
    const p = server.proc
    if(p.exitCode === null && p.signalCode === null){
      await withTimeout(new Promise(resolve => p.once("exit", resolve)), 15000, "the exit after the drain")
    }
    assert.equal(p.exitCode, 0, server.stderr())
  }
})
