// What third-party Phoenix clients and apps moving from Phoenix send, and
// Phoenix answers: numeric refs kept as numbers (raw v1 and v2 WebSocket,
// long-poll, and phxsocket and chunnel, Python clients from PyPI), the null join_ref
// of an unmatched join, Phoenix.Token from Phoenix 1.3/1.4 and float max
// ages, JWTs minted by PyJWT (fractional times, aud, iss, sub), and
// revocation of tokens signed within the revoke skew (--auth-revoke-skew).
import {test, describe, before, after} from "node:test"
import assert from "node:assert/strict"
import {randomBytes} from "node:crypto"
import {startServer, httpRequest, RawHttp, RawWs, RawPhx, handshakeRequest} from "./helpers.mjs"
import {phoenixToken, phoenixTokenLegacy} from "./tokens.mjs"
import {python, runPython, pyjwt} from "./python.mjs"

const T = {timeout: 30000}
const SECRET = "a-phoenix-secret-key-base-of-at-least-sixty-four-bytes-0123456789"
const SALT = "user socket"
const JWT_SECRET = "jwt-secret-for-the-compat-tests-of-at-least-32-bytes"

/** The HTTP status of a WebSocket upgrade to `target`. */
async function upgradeStatus(port, target){
  const conn = await RawHttp.connect(port)
  try {
    conn.send(handshakeRequest({port, path: target, key: randomBytes(16).toString("base64")}))
    return (await conn.response({head: true})).status
  } finally {
    conn.close()
  }
}

const wsWithToken = (port, token) => upgradeStatus(port, `/socket/websocket?vsn=2.0.0&token=${encodeURIComponent(token)}`)

function revoke(apiPort, user){
  return fetch(`http://127.0.0.1:${apiPort}/api/disconnect`, {
    method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify({user, revoke: true}),
  })
}

describe("refs keep their JSON type", () => {
  let server
  before(async () => {
    server = await startServer(["--echo", "--shards", "2", "--idle-timeout", "0", "--longpoll-window", "1"])
  }, {timeout: 20000})
  after(async () => { await server?.stop() }, {timeout: 20000})

  test("v2: numbers come back as numbers in replies and phx_close, strings as strings; unmatched join has a null join_ref", T, async () => {
    const c = await RawPhx.connect(server.port, "2.0.0")
    try {
      const exchange = async (line, n = 1) => {
        c.ws.sendText(JSON.stringify(line))
        const out = []
        for(let i = 0; i < n; i++){ out.push(JSON.parse((await c.next()).raw)) }
        return out
      }
      const [join] = await exchange([1, 1, "echo:a", "phx_join", {}])
      assert.deepEqual(join.slice(0, 4), [1, 1, "echo:a", "phx_reply"])
      assert.equal(join[4].status, "ok")
      assert.deepEqual(await exchange([null, 2, "phoenix", "heartbeat", {}]),
        [[null, 2, "phoenix", "phx_reply", {response: {}, status: "ok"}]])
      assert.deepEqual(await exchange([1, 3, "echo:a", "ping", {n: 3}]),
        [[1, 3, "echo:a", "phx_reply", {response: {n: 3}, status: "ok"}]])
      assert.deepEqual(await exchange([1, "4", "echo:a", "ping", {n: 4}]),
        [[1, "4", "echo:a", "phx_reply", {response: {n: 4}, status: "ok"}]])
      // A second join: its reply, then the first join's phx_close with the first join_ref.
      const [rejoin, close] = await exchange([5, 5, "echo:a", "phx_join", {}], 2)
      assert.deepEqual(rejoin.slice(0, 4), [5, 5, "echo:a", "phx_reply"])
      assert.deepEqual(close, [1, 1, "echo:a", "phx_close", {}])
      // Phoenix's encode_ignore: no join_ref on the unmatched topic's reply.
      assert.deepEqual(await exchange([6, 6, "nosuch:topic", "phx_join", {}]),
        [[null, 6, "nosuch:topic", "phx_reply", {response: {reason: "unmatched topic"}, status: "error"}]])
      assert.deepEqual(await exchange(["7", "7", "nosuch:topic", "phx_join", {}]),
        [[null, "7", "nosuch:topic", "phx_reply", {response: {reason: "unmatched topic"}, status: "error"}]])
    } finally {
      c.ws.destroy()
    }
  })

  test("v1: a numeric ref is answered with the number", T, async () => {
    const c = await RawPhx.connect(server.port, "1.0.0")
    try {
      const exchange = async msg => {
        c.ws.sendText(JSON.stringify(msg))
        return JSON.parse((await c.next()).raw)
      }
      const join = await exchange({topic: "echo:b", event: "phx_join", payload: {}, ref: 0})
      assert.equal(join.ref, 0)
      assert.equal(join.payload.status, "ok")
      assert.deepEqual(await exchange({topic: "echo:b", event: "ping", payload: {n: 1}, ref: 1}),
        {event: "phx_reply", payload: {response: {n: 1}, status: "ok"}, ref: 1, topic: "echo:b"})
      assert.deepEqual(await exchange({topic: "phoenix", event: "heartbeat", payload: {}, ref: "2"}),
        {event: "phx_reply", payload: {response: {}, status: "ok"}, ref: "2", topic: "phoenix"})
    } finally {
      c.ws.destroy()
    }
  })

  test("long-poll: numeric refs come back as numbers", T, async () => {
    const lp = async (method, query, body = null) => {
      const headers = body ? {"Content-Type": "application/x-ndjson"} : {}
      const res = await httpRequest(server.port, method, `/socket/longpoll?${query}`, {headers, body})
      assert.equal(res.status, 200)
      return JSON.parse(res.body.toString("utf8"))
    }
    const {token} = await lp("GET", "vsn=2.0.0")
    const lines = [[7, 7, "echo:lp", "phx_join", {}], [7, 8, "echo:lp", "ping", {n: 8}]]
    assert.equal((await lp("POST", `vsn=2.0.0&token=${token}`, lines.map(l => JSON.stringify(l)).join("\n"))).status, 200)
    const got = []
    while(got.length < 2){
      const res = await lp("GET", `vsn=2.0.0&token=${token}`)
      assert.notEqual(res.status, 410, "the session ended")
      got.push(...res.messages.map(m => JSON.parse(m)))
    }
    assert.deepEqual(got.map(m => m.slice(0, 4)), [[7, 7, "echo:lp", "phx_reply"], [7, 8, "echo:lp", "phx_reply"]])
    assert.deepEqual(got[1][4], {response: {n: 8}, status: "ok"})
  })

  test("phxsocket (Python, from PyPI) joins and gets its push's reply", {timeout: 240000}, async () => {
    // The venv is made once (pip install), then reused.
    await python()
    const out = JSON.parse(await runPython("phx_client.py", [`${server.wsUrl}/socket/websocket`, "echo:py"], 30000))
    assert.deepEqual(out.join.params, {user: "py"})
    assert.deepEqual(out.join.join, {hello: "world"})
    assert.deepEqual(out.push, {response: {n: 1}, status: "ok"})
  })

  test("chunnel (Python, from PyPI) joins and gets its push's reply", {timeout: 240000}, async () => {
    await python()
    const stdout = await runPython("chunnel_client.py", [`${server.wsUrl}/socket/websocket`, "echo:ch"], 30000)
    const out = JSON.parse(stdout.trim().split("\n").pop())
    assert.deepEqual(out.join.params, {user: "py"})
    assert.deepEqual(out.push, {n: 1})
  })
})

describe("Phoenix.Token as older Phoenix and Plug.Crypto sign it", () => {
  let server, capped
  before(async () => {
    const auth = ["--auth", "phoenix_token", "--auth-secret-key-base", SECRET]
    server = await startServer(auth)
    capped = await startServer([...auth, "--auth-max-age", "120.5"])
  }, {timeout: 20000})
  after(async () => { await server?.stop(); await capped?.stop() }, {timeout: 20000})

  test("Phoenix 1.3/1.4 %{data, signed} tokens: a day, or the configured max age", T, async () => {
    const ago = s => ({signedAtMs: Date.now() - s * 1000})
    assert.equal(await wsWithToken(server.port, phoenixTokenLegacy(SECRET, SALT, "ann", ago(3600))), 101)
    assert.equal(await wsWithToken(server.port, phoenixTokenLegacy(SECRET, SALT, 7, ago(86401))), 403)
    assert.equal(await wsWithToken(capped.port, phoenixTokenLegacy(SECRET, SALT, "ann", ago(100))), 101)
    assert.equal(await wsWithToken(capped.port, phoenixTokenLegacy(SECRET, SALT, "ann", ago(121))), 403)
    // Another salt is another key.
    assert.equal(await wsWithToken(server.port, phoenixTokenLegacy(SECRET, "other", "ann")), 403)
  })

  test("a float max_age in the token is seconds", T, async () => {
    const signed = (s, maxAge) => phoenixToken(SECRET, SALT, "bob", {signedAtMs: Date.now() - s * 1000, maxAge, floatMaxAge: true})
    assert.equal(await wsWithToken(server.port, signed(30, 60.0)), 101)
    assert.equal(await wsWithToken(server.port, signed(61, 60.0)), 403)
    assert.equal(await wsWithToken(server.port, signed(30, 86400.5)), 101)
  })

  test("revoke refuses a token signed ahead within the revoke skew, and takes one signed after it", T, async () => {
    const before = Date.now()
    // 1.5 s ahead of the revocation: within the default 2 s revoke skew.
    const ahead = phoenixToken(SECRET, SALT, "rita", {signedAtMs: before + 1500})
    assert.equal(await wsWithToken(server.port, ahead), 101)
    assert.equal((await revoke(server.apiPort, "rita")).status, 200)
    const after = Date.now()
    assert.equal(await wsWithToken(server.port, ahead), 403)
    assert.equal(await wsWithToken(server.port, phoenixToken(SECRET, SALT, "rita", {signedAtMs: before})), 403)
    const later = phoenixToken(SECRET, SALT, "rita", {signedAtMs: after + 3000})
    assert.equal(await wsWithToken(server.port, later), 101)
  })
})

describe("JWTs minted by PyJWT", () => {
  let server
  before(async () => {
    server = await startServer([
      "--echo", "--auth", "jwt", "--auth-jwt-secret", JWT_SECRET,
      "--auth-jwt-audience", "throng", "--auth-jwt-issuer", "https://auth.example",
    ])
    await python()
  }, {timeout: 240000})
  after(async () => { await server?.stop() }, {timeout: 20000})

  const now = () => Date.now() / 1000
  const claims = extra => ({sub: "ann", exp: now() + 60.5, aud: "throng", iss: "https://auth.example", ...extra})

  test("fractional exp and iat, nbf within 60 s, aud as a list: accepted; the user id is sub", T, async () => {
    assert.equal(await wsWithToken(server.port, await pyjwt(JWT_SECRET, claims({iat: now() - 0.5, nbf: now() + 30}))), 101)
    assert.equal(await wsWithToken(server.port, await pyjwt(JWT_SECRET, claims({aud: ["api", "throng"]}))), 101)
    const token = await pyjwt(JWT_SECRET, claims({sub: 42}))
    const ws = await RawWs.connect(server.port, {path: `/socket/websocket?vsn=2.0.0&token=${token}`})
    try {
      const c = new RawPhx(ws, "2.0.0")
      const join = await c.join("echo:jwt")
      assert.equal(join.reply.payload.response.user_id, "42")
    } finally {
      ws.destroy()
    }
  })

  test("refused: no aud, another aud or iss, a fractional sub, expired", T, async () => {
    const {aud: _aud, ...noAud} = claims()
    for(const bad of [
      noAud,
      claims({aud: "someone-else"}),
      claims({iss: "https://evil.example"}),
      claims({sub: 4.2}),
      claims({exp: now() - 0.5}),
      claims({nbf: now() + 120}),
    ]){
      assert.equal(await wsWithToken(server.port, await pyjwt(JWT_SECRET, bad)), 403, JSON.stringify(bad))
    }
  })

  test("revoke refuses a token whose fractional iat is within the revoke skew, and takes a later one", T, async () => {
    const before = now()
    const ahead = await pyjwt(JWT_SECRET, claims({sub: "rob", iat: before + 1.5}))
    assert.equal(await wsWithToken(server.port, ahead), 101)
    assert.equal((await revoke(server.apiPort, "rob")).status, 200)
    const after = now()
    assert.equal(await wsWithToken(server.port, ahead), 403)
    assert.equal(await wsWithToken(server.port, await pyjwt(JWT_SECRET, claims({sub: "rob", iat: after + 3}))), 101)
  })
})

describe("--log-requests", () => {
  let server
  before(async () => { server = await startServer(["--log-requests", "--longpoll-window", "1"]) }, {timeout: 20000})
  after(async () => { await server?.stop() }, {timeout: 20000})

  test("token params are logged redacted, on WebSocket and long-poll alike", T, async () => {
    const secret = "s3cret-token-value"
    assert.equal(await upgradeStatus(server.port, `/socket/websocket?vsn=2.0.0&token=${secret}&user=ann`), 101)
    const res = await httpRequest(server.port, "GET", `/socket/longpoll?vsn=2.0.0&token=a&token=${secret}`)
    assert.equal(res.status, 200)
    const logged = () => server.stderr().split("\n").filter(l => l.includes("/socket/"))
    const deadline = Date.now() + 5000
    while(logged().length < 2 && Date.now() < deadline){ await new Promise(resolve => setTimeout(resolve, 20)) }
    const lines = logged()
    assert.equal(lines.length, 2, server.stderr())
    assert.ok(lines.every(l => !l.includes(secret)), lines.join("\n"))
    assert.match(lines[0], /token=\[REDACTED\]&user=ann/)
    assert.match(lines[1], /token=\[REDACTED\]&token=\[REDACTED\]/)
  })
})
