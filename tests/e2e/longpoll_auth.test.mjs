// Long-poll under connect authentication (Phoenix.Token), check_origin and a
// user disconnect from the server API: a long-poll session starts only for
// a good token (the `token` param, or phoenix.js's `authToken` sent as
// X-Phoenix-AuthToken), a foreign Origin is refused, and a disconnect ends
// the user's long-poll sessions as it closes their WebSockets.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {LongPoll} from "phoenix"
import {
  startServer, phoenixSocket, connectPhoenix, closePhoenix, joinResult, httpRequest, withTimeout, deferred, readMetric
} from "./helpers.mjs"
import {phoenixToken} from "./tokens.mjs"

const T = {timeout: 20000}
const SECRET = "a-phoenix-secret-key-base-of-at-least-sixty-four-bytes-0123456789"
const SALT = "user socket"
const API_KEY = "lp-api-key-0123456789"
const token = user => phoenixToken(SECRET, SALT, user)

let server
before(async () => {
  server = await startServer([
    "--echo", "--longpoll-window", "1", "--auth", "phoenix_token",
    "--auth-secret-key-base", SECRET, "--auth-salt", SALT, "--api-key", API_KEY,
  ])
}, {timeout: 20000})
after(async () => { await server?.stop() }, {timeout: 20000})

async function lp(method, query, headers = {}){
  const res = await httpRequest(server.port, method, `/socket/longpoll?${query}`, {headers})
  assert.equal(res.status, 200, `HTTP ${res.status}: ${res.body}`)
  return JSON.parse(res.body.toString("utf8"))
}

for(const how of ["params", "authToken"]){
  test(`a good token as ${how} starts a session; the app sees the user, not the token`, T, async t => {
    const opts = how === "params" ? {params: {token: token("ivy"), room: "1"}} : {authToken: token("ivy"), params: {room: "1"}}
    const socket = await connectPhoenix(server.wsUrl, "2.0.0", {transport: LongPoll, ...opts})
    t.after(() => closePhoenix(socket))
    const res = await joinResult(socket.channel("echo:who", {}))
    assert.equal(res.status, "ok", JSON.stringify(res))
    assert.equal(res.response.user_id, "ivy")
    assert.deepEqual(res.response.params, {room: "1"})
    assert.equal(res.response.auth_token, null)
  })
}

test("no token, a bad token: {\"status\":403} and no session; counted as auth refusals", T, async () => {
  const before = await readMetric(server.apiUrl, "throng_auth_refusals_total")
  assert.deepEqual(await lp("GET", "vsn=2.0.0"), {status: 403})
  assert.deepEqual(await lp("GET", "vsn=2.0.0&token=forged"), {status: 403})
  assert.deepEqual(await lp("GET", "vsn=2.0.0", {"X-Phoenix-AuthToken": token("ivy") + "x"}), {status: 403})
  assert.equal(await readMetric(server.apiUrl, "throng_auth_refusals_total"), before + 3)
  // phoenix.js sees the 403 as an error of the transport
  const socket = phoenixSocket(server.wsUrl, "2.0.0", {transport: LongPoll})
  const refused = deferred()
  socket.onError(reason => refused.resolve(reason))
  socket.connect()
  try {
    assert.equal(await withTimeout(refused.promise, 5000, "the refusal"), 403)
  } finally {
    await closePhoenix(socket)
  }
})

test("another site's Origin is refused with {\"status\":403}, the same host passes", T, async () => {
  const before = await readMetric(server.apiUrl, "throng_origin_refusals_total")
  const q = `vsn=2.0.0&token=${encodeURIComponent(token("jo"))}`
  assert.deepEqual(await lp("GET", q, {Origin: "https://evil.example"}), {status: 403})
  assert.equal(await readMetric(server.apiUrl, "throng_origin_refusals_total"), before + 1)
  const ok = await lp("GET", q, {Origin: `http://127.0.0.1:${server.port}`})
  assert.equal(ok.status, 410)
})

test("a user disconnect ends the user's long-poll sessions; phoenix.js notices", T, async t => {
  const socket = await connectPhoenix(server.wsUrl, "2.0.0", {transport: LongPoll, params: {token: token("kim")}})
  t.after(() => closePhoenix(socket))
  assert.equal((await joinResult(socket.channel("echo:kim", {}))).status, "ok")
  const created = await lp("GET", `vsn=2.0.0&token=${encodeURIComponent(token("kim"))}`)
  const closed = deferred()
  socket.onClose(e => closed.resolve(e.code))
  const before = await readMetric(server.apiUrl, "throng_user_disconnects_total")
  const res = await fetch(`http://127.0.0.1:${server.apiPort}/api/disconnect`, {
    method: "POST", headers: {"content-type": "application/json", "x-api-key": API_KEY}, body: JSON.stringify({user: "kim"}),
  })
  assert.equal(res.status, 200)
  // phoenix.js's next poll gets 410 (session gone) and it closes to reconnect
  assert.equal(await withTimeout(closed.promise, 10000, "the long-poll socket to close"), 3410)
  assert.deepEqual(await lp("GET", `vsn=2.0.0&token=${created.token}`), {status: 410})
  assert.ok(await readMetric(server.apiUrl, "throng_user_disconnects_total") >= before + 2)
})
