// Connect authentication, check_origin, topic rules, the push budget and the server
// API, with the official phoenix.js client and raw HTTP: one server with Phoenix.Token
// auth and [[topics]] rules from a TOML file, one with JWT auth.
import {test, describe, before, after} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {randomBytes} from "node:crypto"
import {
  startServer, phoenixSocket, connectPhoenix, closePhoenix, joinResult, nextEvent, withTimeout,
  deferred, RawHttp, handshakeRequest, readMetric
} from "./helpers.mjs"
import {phoenixToken, jwtHS256, nowS} from "./tokens.mjs"

const T = {timeout: 30000}
const SECRET = "a-phoenix-secret-key-base-of-at-least-sixty-four-bytes-0123456789"
const SALT = "user socket"
const API_KEY = "test-api-key-0123456789"
const token = (user, opts) => phoenixToken(SECRET, SALT, user, opts)

const dir = mkdtempSync(path.join(tmpdir(), "throng-auth-"))
const configFile = path.join(dir, "auth.toml")
writeFileSync(configFile, `
push_rate = 5
push_burst = 5
push_strikes = 3
api_key = "${API_KEY}"

[auth]
mode = "phoenix_token"
secret_key_base = "${SECRET}"
salt = "${SALT}"

[[topics]]
pattern = "private:{user}"
join = "users"
push = ["new:msg"]

[[topics]]
pattern = "rooms:*"
push = ["new:msg"]
`)

let server
before(async () => { server = await startServer(["--config", configFile]) }, {timeout: 20000})
after(async () => { await server?.stop(); rmSync(dir, {recursive: true, force: true}) }, {timeout: 20000})

/** The status and body of a WebSocket upgrade request with extra header lines. */
async function upgrade(port, target, extraHeaders = []){
  const conn = await RawHttp.connect(port)
  try {
    conn.send(handshakeRequest({port, path: target, key: randomBytes(16).toString("base64"), extraHeaders}))
    const res = await conn.response({head: true})
    return {status: res.status, body: res.body?.toString("utf8") ?? "", headers: res.headers}
  } finally {
    conn.close()
  }
}

function api(method, route, body, {key = API_KEY, port = server.apiPort} = {}){
  const headers = {"content-type": "application/json"}
  if(key){ headers["x-api-key"] = key }
  return fetch(`http://127.0.0.1:${port}${route}`, {method, headers, body: typeof body === "string" ? body : body && JSON.stringify(body)})
}

/** A phoenix.js socket connected with `opts`, closed when the test ends. */
async function connected(t, opts){
  const socket = await connectPhoenix(server.wsUrl, "2.0.0", opts)
  t.after(() => closePhoenix(socket))
  return socket
}

describe("connect authentication (Phoenix.Token)", () => {
  test("a valid token in the params connects; the user joins", T, async t => {
    const socket = await connected(t, {params: {token: token("alice")}})
    const res = await joinResult(socket.channel("rooms:lobby", {user: "alice"}))
    assert.equal(res.status, "ok")
  })

  test("the authToken subprotocol connects too, and is answered `phoenix`", T, async t => {
    const socket = await connected(t, {authToken: token(42)})
    const res = await joinResult(socket.channel("private:42"))
    assert.equal(res.status, "ok", "user 42 from an integer token joins private:42")
    const raw = await upgrade(server.port, "/socket/websocket?vsn=2.0.0", [
      "Sec-WebSocket-Protocol: phoenix, base64url.bearer.phx." + Buffer.from(token("bob")).toString("base64").replace(/=+$/, ""),
    ])
    assert.equal(raw.status, 101)
    assert.equal(raw.headers["sec-websocket-protocol"], "phoenix")
  })

  test("missing, tampered, expired and future-signed tokens get 403 before the upgrade", T, async () => {
    const before = await readMetric(server.apiUrl, "throng_auth_refusals_total")
    const good = token("alice")
    const cases = {
      missing: "/socket/websocket?vsn=2.0.0",
      tampered: `/socket/websocket?vsn=2.0.0&token=${encodeURIComponent(good.slice(0, -3) + "AAA")}`,
      otherSalt: `/socket/websocket?vsn=2.0.0&token=${phoenixToken(SECRET, "user auth", "alice")}`,
      expired: `/socket/websocket?vsn=2.0.0&token=${token("alice", {signedAtMs: Date.now() - 120_000, maxAge: 60})}`,
      future: `/socket/websocket?vsn=2.0.0&token=${token("alice", {signedAtMs: Date.now() + 3_600_000})}`,
    }
    for(const [name, target] of Object.entries(cases)){
      const res = await upgrade(server.port, target)
      assert.equal(res.status, 403, `${name}: ${res.status} ${res.body}`)
    }
    assert.equal(await readMetric(server.apiUrl, "throng_auth_refusals_total"), before + Object.keys(cases).length)
  })

  test("phoenix.js, refused, backs off between reconnects instead of hammering", T, async () => {
    // phoenix.js's own schedule (reconnectAfterMs unset): 10, 50, 100, 150, 200 ms, ...
    // then every 5 s, forever; a 403 is an error + close 1006 to it, like a network error.
    const socket = phoenixSocket(server.wsUrl, "2.0.0", {params: {token: "not-a-token"}, reconnectAfterMs: undefined})
    const errors = []
    const sixth = deferred()
    socket.onError(() => { errors.push(Date.now()); if(errors.length === 6){ sixth.resolve() } })
    const before = await readMetric(server.apiUrl, "throng_auth_refusals_total")
    socket.connect()
    try {
      await withTimeout(sixth.promise, 10000, "six refused connects")
    } finally {
      await closePhoenix(socket)
    }
    const gaps = errors.slice(1).map((at, i) => at - errors[i])
    // setTimeout never fires early by more than a tick: these are lower bounds only.
    assert.ok(gaps[4] >= 190, `the 6th attempt waited ${gaps[4]} ms (schedule: 200): ${gaps}`)
    assert.ok(gaps.reduce((a, b) => a + b) >= 480, `6 attempts took ${gaps} ms`)
    const refused = await readMetric(server.apiUrl, "throng_auth_refusals_total") - before
    assert.ok(refused >= 6 && refused <= errors.length + 1, `server saw ${refused} attempts for ${errors.length} errors`)
  })
})

describe("check_origin", () => {
  test("another site's Origin is refused with 403 and counted; the same host and no Origin pass", T, async () => {
    const target = `/socket/websocket?vsn=2.0.0&token=${token("alice")}`
    const before = await readMetric(server.apiUrl, "throng_origin_refusals_total")
    const evil = await upgrade(server.port, target, ["Origin: https://evil.example"])
    assert.equal(evil.status, 403)
    assert.equal((await upgrade(server.port, target, ["Origin: null"])).status, 403)
    assert.equal((await upgrade(server.port, target, [`Origin: http://127.0.0.1:${server.port}`])).status, 101)
    assert.equal((await upgrade(server.port, target)).status, 101)
    assert.equal(await readMetric(server.apiUrl, "throng_origin_refusals_total"), before + 2)
  })

  test("--check-origin false lets any Origin in; a list allows its hosts and wildcards", T, async () => {
    const off = await startServer(["--check-origin", "false"])
    const list = await startServer(["--check-origin", "https://app.example.com,//*.example.org"])
    try {
      const target = "/socket/websocket?vsn=2.0.0"
      assert.equal((await upgrade(off.port, target, ["Origin: https://evil.example"])).status, 101)
      assert.equal((await upgrade(list.port, target, ["Origin: https://app.example.com"])).status, 101)
      assert.equal((await upgrade(list.port, target, ["Origin: http://a.b.example.org:8080"])).status, 101)
      assert.equal((await upgrade(list.port, target, ["Origin: http://app.example.com"])).status, 403)
      assert.equal((await upgrade(list.port, target, [`Origin: http://127.0.0.1:${list.port}`])).status, 403)
    } finally {
      await off.stop()
      await list.stop()
    }
  })
})

describe("topic rules", () => {
  test("private:{user} is joinable only by that user; rooms:* by anyone", T, async t => {
    const alice = await connected(t, {params: {token: token("alice")}})
    const bob = await connected(t, {params: {token: token("bob")}})
    assert.equal((await joinResult(alice.channel("private:alice"))).status, "ok")
    const refused = await joinResult(bob.channel("private:alice"))
    assert.deepEqual(refused, {status: "error", response: {reason: "unauthorized"}})
    assert.equal((await joinResult(bob.channel("private:bob"))).status, "ok")
    assert.equal((await joinResult(bob.channel("rooms:lobby", {user: "bob"}))).status, "ok")
    const unruled = await joinResult(bob.channel("elsewhere:1"))
    assert.equal(unruled.status, "error")
    // The socket id topic is not a channel.
    const id = await joinResult(bob.channel("users_socket:bob"))
    assert.deepEqual(id, {status: "error", response: {reason: "unmatched topic"}})
  })

  test("a push the rules do not list is refused; a listed one is relayed to the topic", T, async t => {
    const alice = await connected(t, {params: {token: token("carol")}})
    const ch = alice.channel("private:carol")
    assert.equal((await joinResult(ch)).status, "ok")
    const got = nextEvent(ch, "new:msg")
    const ok = await new Promise(resolve => ch.push("new:msg", {body: "hi"}).receive("ok", resolve))
    assert.deepEqual(ok, {})
    assert.deepEqual(await got, {body: "hi"})
    const refused = await new Promise(resolve => ch.push("other", {}).receive("error", resolve))
    assert.deepEqual(refused, {reason: "unauthorized"})
  })
})

describe("push budget", () => {
  test("pushes past the burst are answered rate limited, and a client that keeps on is closed with 1008", T, async t => {
    const socket = await connected(t, {params: {token: token("dave")}})
    const ch = socket.channel("private:dave")
    assert.equal((await joinResult(ch)).status, "ok")
    const closed = deferred()
    socket.onClose(event => closed.resolve(event.code))
    const limitedBefore = await readMetric(server.apiUrl, "throng_rate_limited_total")
    const replies = []
    // burst 5, 5/s: the first 5 pass, then 2 refusals, and the 3rd refusal closes.
    for(let i = 0; i < 8; i++){
      replies.push(new Promise(resolve => ch.push("new:msg", {i})
        .receive("ok", () => resolve("ok"))
        .receive("error", r => resolve(r.reason))
        .receive("timeout", () => resolve("timeout"))))
    }
    const code = await withTimeout(closed.promise, 10000, "the 1008 close")
    assert.equal(code, 1008)
    const seen = await Promise.all(replies.slice(0, 8).map(p => withTimeout(p, 10000, "a reply").catch(() => "none")))
    assert.deepEqual(seen.slice(0, 5), ["ok", "ok", "ok", "ok", "ok"])
    assert.ok(seen.slice(5).includes("rate limited"), `replies: ${seen}`)
    assert.ok(await readMetric(server.apiUrl, "throng_rate_limited_total") >= limitedBefore + 3)
    assert.ok(await readMetric(server.apiUrl, "throng_rate_limit_closes_total") >= 1)
  })
})

describe("server API", () => {
  test("broadcast reaches subscribers; bad key 401, bad JSON 400 with the reason, big body 413", T, async t => {
    const socket = await connected(t, {params: {token: token("erin")}})
    const ch = socket.channel("rooms:lobby", {user: "erin"})
    assert.equal((await joinResult(ch)).status, "ok")
    const got = nextEvent(ch, "announce")
    const res = await api("POST", "/api/broadcast", {topic: "rooms:lobby", event: "announce", payload: {text: "hello"}})
    assert.equal(res.status, 200)
    assert.deepEqual(await res.json(), {ok: true})
    assert.deepEqual(await got, {text: "hello"})

    const noKey = await api("POST", "/api/broadcast", {topic: "rooms:lobby", event: "x"}, {key: null})
    assert.equal(noKey.status, 401)
    assert.equal((await noKey.json()).error.code, "unauthorized")
    const bad = await api("POST", "/api/broadcast", "{\"topic\": ")
    assert.equal(bad.status, 400)
    const err = (await bad.json()).error
    assert.equal(err.code, "bad_json")
    assert.match(err.message, /EOF/)
    const reserved = await api("POST", "/api/broadcast", {topic: "users_socket:erin", event: "disconnect"})
    assert.equal(reserved.status, 400)
    const big = await api("POST", "/api/broadcast", JSON.stringify({topic: "t", event: "e", payload: "x".repeat(2 << 20)}))
    assert.equal(big.status, 413)
    assert.equal((await big.json()).error.code, "too_large")
    assert.equal((await api("GET", "/api/nope")).status, 404)
  })

  test("topics and stats count subscribers", T, async t => {
    const socket = await connected(t, {params: {token: token("frank")}})
    assert.equal((await joinResult(socket.channel("private:frank"))).status, "ok")
    const topics = await (await api("GET", "/api/topics")).json()
    assert.equal(topics.nodes, 1)
    assert.equal(topics.topics["private:frank"], 1)
    assert.ok(!Object.keys(topics.topics).some(k => k.startsWith("users_socket:")), "socket ids are not topics")
    const stats = await (await api("GET", "/api/stats")).json()
    assert.ok(stats.node.stats.websockets >= 1)
    assert.ok(stats.cluster.users >= 1)
  })

  test("disconnect closes every socket of the user with 1001; with revoke, the reconnects are refused", T, async t => {
    const old = token("gina", {signedAtMs: Date.now() - 1000})
    // They reconnect at once (50 ms), with the same, now revoked, token.
    const a = await connected(t, {params: {token: old}, reconnectAfterMs: () => 50})
    const b = await connected(t, {authToken: old, reconnectAfterMs: () => 50})
    const other = await connected(t, {params: {token: token("hank")}})
    const codes = [a, b].map(s => { const d = deferred(); s.onClose(e => d.resolve(e.code)); return d.promise })
    const reconnectRefused = deferred()
    a.onError(() => reconnectRefused.resolve())
    let otherClosed = false
    other.onClose(() => { otherClosed = true })
    const before = Date.now()
    const res = await api("POST", "/api/disconnect", {user: "gina", revoke: true})
    const after = Date.now()
    assert.equal(res.status, 200)
    assert.deepEqual(await withTimeout(Promise.all(codes), 5000, "both of gina's sockets to close"), [1001, 1001])
    await withTimeout(reconnectRefused.promise, 5000, "gina's reconnect to be refused")
    assert.equal((await upgrade(server.port, `/socket/websocket?vsn=2.0.0&token=${old}`)).status, 403)
    // The revocation (made between `before` and `after`) reaches 2 s past
    // its instant (--auth-revoke-skew's default, for an app whose clock runs
    // a little ahead): a token signed at the revocation is refused, one
    // signed 3 s after it (a user who logged in again) connects, with no
    // minute-long lockout.
    const atRevoke = token("gina", {signedAtMs: before})
    assert.equal((await upgrade(server.port, `/socket/websocket?vsn=2.0.0&token=${atRevoke}`)).status, 403)
    const fresh = token("gina", {signedAtMs: after + 3000})
    assert.equal((await upgrade(server.port, `/socket/websocket?vsn=2.0.0&token=${fresh}`)).status, 101)
    assert.equal(otherClosed, false, "another user's socket stays")
    assert.ok(await readMetric(server.apiUrl, "throng_user_disconnects_total") >= 2)
  })
})

describe("JWT", () => {
  // 32 bytes: the least an HS256 secret may have.
  const JWT_SECRET = "jwt-secret-of-32-bytes-012345678"
  let jwt
  before(async () => {
    assert.equal(JWT_SECRET.length, 32)
    jwt = await startServer(["--auth", "jwt", "--auth-jwt-secret", JWT_SECRET, "--api-key", API_KEY])
  }, {timeout: 20000})
  after(async () => { await jwt?.stop() }, {timeout: 20000})

  test("sub is the user, exp is honoured, the channels claim limits joins", T, async t => {
    const good = jwtHS256(JWT_SECRET, {sub: "ivy", exp: nowS() + 60, channels: ["rooms:lobby"]})
    const socket = await connectPhoenix(jwt.wsUrl, "2.0.0", {authToken: good})
    t.after(() => closePhoenix(socket))
    assert.equal((await joinResult(socket.channel("rooms:lobby", {user: "ivy"}))).status, "ok")
    const outside = await joinResult(socket.channel("rooms:other", {user: "ivy"}))
    assert.deepEqual(outside, {status: "error", response: {reason: "unauthorized"}})
    const expired = jwtHS256(JWT_SECRET, {sub: "ivy", exp: nowS() - 5})
    assert.equal((await upgrade(jwt.port, `/socket/websocket?vsn=2.0.0&token=${expired}`)).status, 403)
    const wrongKey = jwtHS256("another-secret-of-at-least-32-bytes", {sub: "ivy", exp: nowS() + 60})
    assert.equal((await upgrade(jwt.port, `/socket/websocket?vsn=2.0.0&token=${wrongKey}`)).status, 403)
  })

  test("after a revoke, a token issued at the revocation is refused and one issued 3 s later connects", T, async () => {
    const status = async tok => (await upgrade(jwt.port, `/socket/websocket?vsn=2.0.0&token=${tok}`)).status
    const mint = iat => jwtHS256(JWT_SECRET, {sub: "42", iat, exp: iat + 600})
    assert.equal(await status(mint(nowS() - 1)), 101, "before the revocation")
    const before = Date.now()
    const res = await api("POST", "/api/disconnect", {user: "42", revoke: true}, {port: jwt.apiPort})
    const after = Date.now()
    assert.deepEqual([res.status, await res.json()], [200, {ok: true, revoked: true}])
    // iat is whole seconds: the revocation's second, at or before its instant.
    assert.equal(await status(mint(Math.floor(before / 1000))), 403, "issued at the revocation")
    // 3 s after the revocation (ahead of this clock, within the 60 s a token may claim).
    assert.equal(await status(mint(Math.ceil(after / 1000) + 3)), 101, "issued 3 s after it")
    // Another user is untouched.
    const other = jwtHS256(JWT_SECRET, {sub: "43", iat: Math.floor(before / 1000), exp: nowS() + 600})
    assert.equal(await status(other), 101)
  })
})
