// The Pusher wire layer (crates/throng-protocol/src/pusher) against the real
// packages: pusher-js (its own Protocol module, then whole sessions),
// Laravel Echo, and the `pusher` server SDKs for Node and Python.
// - server_frames.json holds throng's encoded frames byte for byte (the Rust
//   test pusher_wire.rs keeps them equal to the encoders' output); here
//   pusher-js decodes each to what the app must get.
// - vectors.json holds what the SDKs and clients send; the Rust test checks
//   throng accepts it and signs the same; here it is re-recorded from the
//   live packages and must not have changed.
//
//   node --test tests/pusher/
import assert from "node:assert/strict"
import {readFileSync} from "node:fs"
import path from "node:path"
import {test} from "node:test"
import {build} from "esbuild"
import Pusher from "pusher"
import {REPO_ROOT} from "../e2e/helpers.mjs"
import {APP, VECTORS_FILE, nodeSdk, pythonSdkVectors, recordVectors} from "./vectors.mjs"
import {echoSession, goldenFrames, pusherJsSession} from "./session.mjs"

const {doc: golden, frame} = goldenFrames()

/** pusher-js's Protocol module, built from the source the package ships. */
async function pusherJsProtocol(){
  const entry = path.join(REPO_ROOT, "node_modules/pusher-js/src/core/connection/protocol/protocol.ts")
  const out = await build({entryPoints: [entry], bundle: true, format: "esm", platform: "node", write: false, logLevel: "silent"})
  const mod = await import("data:text/javascript;base64," + Buffer.from(out.outputFiles[0].text).toString("base64"))
  return mod.default
}

/** What decodeMessage returns, as JSON (undefined fields dropped). */
const plain = (v) => JSON.parse(JSON.stringify(v))

test("pusher-js's Protocol.decodeMessage reads every throng frame as the app must see it", async () => {
  const Protocol = await pusherJsProtocol()
  assert.ok(golden.frames.length >= 20)
  for(const f of golden.frames){
    assert.ok(f.frame, `${f.name} has bytes (run the Rust test with THRONG_BLESS=1)`)
    assert.deepEqual(plain(Protocol.decodeMessage({data: f.frame})), f.expect, f.name)
  }
  assert.deepEqual(Protocol.processHandshake({data: frame.connection_established}),
    {action: "connected", id: "123.456", activityTimeout: 120000})
  const refused = Protocol.processHandshake({data: frame.error_app_does_not_exist})
  assert.equal(refused.action, "refused")
  assert.deepEqual(refused.error.data, {code: 4001, message: "App key nope does not exist: check the key your Pusher client connects with"})
})

test("pusher-js acts on every close code as throng's error_code says", async () => {
  const Protocol = await pusherJsProtocol()
  assert.ok(golden.close_codes.length >= 20)
  for(const {code, action} of golden.close_codes){
    assert.equal(Protocol.getCloseAction({code}), action, `close code ${code}`)
  }
})

test("a pusher-js session takes every kind of throng frame", {timeout: 30000}, async () => {
  const {seen, sent} = await pusherJsSession(frame, nodeSdk())
  assert.equal(seen.socketId, "123.456")
  assert.deepEqual(seen.public, [{text: "hi ü \"you\"", n: 1}, "just text"])
  assert.deepEqual(seen.private, {typing: true})
  const p = seen.presence
  // Three members, then 4 joined and 2 (no user_info: null) left.
  assert.equal(p.count, 3)
  assert.deepEqual(p.me, {id: "1", info: {name: "Ann"}})
  assert.deepEqual(p.three, {id: "ü \"3\"", info: {name: "Zoë", tags: ["a\\b"]}})
  assert.deepEqual(p.added, {id: "4", info: {name: "Dan"}})
  assert.deepEqual(p.removed, {id: "2", info: null})
  assert.deepEqual([p.typing, p.meta], [{typing: true}, {user_id: "1"}])
  assert.deepEqual(seen.subscriptionError, golden.frames.find((f) => f.name === "subscription_error").expect.data)
  assert.deepEqual(seen.cache, [null, {temp: 21}])
  assert.deepEqual(seen.toUser, {a: 1})
  assert.deepEqual(seen.userData, {id: "12345", name: "Ann"})
  assert.deepEqual(seen.error, {type: "PusherError", data: {code: 4300, message: "unknown event \"pusher:watchlist\""}})
  assert.equal(seen.stateAfterError, "connected")
  assert.ok(sent.includes(`{"event":"pusher:pong","data":{}}`))
})

test("a Laravel Echo session (pusher broadcaster) takes them too", {timeout: 30000}, async () => {
  const {seen, sent} = await echoSession(frame, nodeSdk())
  assert.deepEqual(seen.message, {text: "hi ü \"you\"", n: 1})
  assert.deepEqual(seen.whisper, {typing: true})
  assert.deepEqual(seen.here, [{name: "Ann"}, null, {name: "Zoë", tags: ["a\\b"]}])
  assert.deepEqual([seen.joining, seen.leaving], [{name: "Dan"}, null])
  assert.equal(seen.error.data.code, 4300)
  assert.ok(sent.some((s) => s.includes(`"event":"client-typing"`)))
})

test("the Node SDK validates throng's webhook", () => {
  const hook = golden.webhook
  const sdk = new Pusher({appId: APP.id, key: hook.key, secret: hook.secret})
  const request = (body, signature = hook.signature, key = hook.key) => ({
    headers: {"x-pusher-key": key, "x-pusher-signature": signature, "content-type": "application/json"}, rawBody: body,
  })
  const valid = sdk.webhook(request(hook.body))
  assert.equal(valid.isValid(), true)
  assert.deepEqual(valid.getEvents(), hook.events)
  assert.equal(valid.getTime().getTime(), hook.time_ms)
  assert.equal(sdk.webhook(request(hook.body + " ")).isValid(), false)
  assert.equal(sdk.webhook(request(hook.body, hook.signature, "another-key")).isValid(), false)
  assert.equal(sdk.webhook(request(hook.body, "0".repeat(64))).isValid(), false)
})

let python = null
const pythonOnce = () => (python ??= pythonSdkVectors())

test("the Python SDK validates throng's webhook", {timeout: 300000}, async () => {
  const out = await pythonOnce()
  const hook = golden.webhook
  assert.deepEqual(out.validated_webhook, {time_ms: hook.time_ms, events: hook.events})
  assert.equal(out.tampered_webhook, null)
})

test("vectors.json is what the SDKs and clients send today", {timeout: 300000}, async () => {
  await pythonOnce()
  const committed = JSON.parse(readFileSync(VECTORS_FILE, "utf8"))
  const now = await recordVectors()
  assert.deepEqual(now, committed, "the packages send something else: re-record with node tests/pusher/vectors.mjs --write, then run cargo test -p throng-protocol --test pusher_wire")
})
