// tests/pusher/vectors.json: what the official Pusher SDKs and clients put
// on the wire, recorded from the real packages (pinned in package.json and
// tests/pusher/python.mjs):
// - the `pusher` Node SDK and the `pusher` Python SDK: channel and user
//   signatures, webhook signatures, and every HTTP API request they sign
//   (sent to a capture server, their clocks pinned to TIMESTAMP);
// - pusher-js and Laravel Echo: every frame they send in a session against a
//   stand-in server speaking throng's own frames (session.mjs).
// crates/throng-protocol/tests/pusher_wire.rs checks throng accepts all of it
// and signs the same; wire_vectors.test.mjs re-records it from the live
// packages and compares, so the file cannot drift from them.
//
//   node tests/pusher/vectors.mjs --write     # after upgrading a package
import {writeFileSync} from "node:fs"
import path from "node:path"
import {fileURLToPath} from "node:url"
import Pusher from "pusher"
import {REPO_ROOT} from "../e2e/helpers.mjs"
import {captureServer} from "./capture.mjs"
import {runPythonJson} from "./python.mjs"
import {FRAMES_FILE, goldenFrames, echoSession, pusherJsSession} from "./session.mjs"

export const VECTORS_FILE = path.join(REPO_ROOT, "tests/pusher/vectors.json")
/** Pusher's documentation's example app (rest-api.md, auth-signatures.md). */
export const APP = {id: "3", key: "278d425bdf160c739803", secret: "7ad3773142a6692b25b8"}
/** The documentation's example auth_timestamp; the SDKs' clocks are pinned to it. */
export const TIMESTAMP = 1353088179
const MASTER_KEY = Buffer.alloc(32, 7).toString("base64")

/** The Node SDK, pointed at `port` (the capture server). */
export function nodeSdk(port = 1){
  return new Pusher({appId: APP.id, key: APP.key, secret: APP.secret, host: "127.0.0.1", port, useTLS: false,
    encryptionMasterKeyBase64: MASTER_KEY})
}

function nodeSignatures(sdk){
  const channel_auth = [
    ["1234.1234", "private-foobar", undefined],
    ["1234.1234", "presence-foobar", {user_id: 10, user_info: {name: "Mr. Channels"}}],
    ["123.456", "presence-room", {user_id: "ü \"3\"", user_info: {name: "Zoë"}}],
    ["123.456", "private-encrypted-secrets", undefined],
    ["123.456", "private-cache-chat", undefined],
    ["123.456", "private-foo-bar_1234@=,.;", undefined],
  ].map(([socket_id, channel, data]) => {
    const a = sdk.authorizeChannel(socket_id, channel, data)
    return {socket_id, channel, channel_data: a.channel_data ?? null, auth: a.auth}
  })
  const user_auth = [["1234.1234", {id: "12345"}], ["123.456", {id: "u-1", name: "Ann", watchlist: ["u-2"]}]]
    .map(([socket_id, user]) => ({socket_id, ...sdk.authenticateUser(socket_id, user), id: user.id}))
  const token = new Pusher.Token(APP.key, APP.secret)
  const webhooks = [
    `{"time_ms":${TIMESTAMP}000,"events":[{"name":"channel_occupied","channel":"a"}]}`,
    `{"time_ms":${TIMESTAMP}000,"events":[{"name":"client_event","channel":"private-ü","event":"client-x","data":"{}","socket_id":"1.2"}]}`,
  ].map((body) => ({body, signature: token.sign(body)}))
  return {channel_auth, user_auth, webhooks}
}

async function nodeRequests(sdk){
  await sdk.trigger(["my-channel", "private-chat"], "new-message", {text: "hi ü \"you\"", n: 1},
    {socket_id: "123.456", info: "subscription_count"})
  await sdk.trigger("presence-room", "plain", "just text")
  await sdk.triggerBatch([{channel: "my-channel", name: "e1", data: {a: 1}},
    {channel: "presence-room", name: "e2", data: "x", socket_id: "1.2", info: "user_count"}])
  await sdk.get({path: "/channels", params: {filter_by_prefix: "presence-", info: "user_count"}})
  await sdk.get({path: "/channels"})
  await sdk.get({path: "/channels/presence-room", params: {info: "user_count,subscription_count"}})
  await sdk.get({path: "/channels/my-channel", params: {info: "subscription_count"}})
  await sdk.get({path: "/channels/presence-room/users"})
  await sdk.terminateUserConnections("u-1")
  await sdk.sendToUser("12345", "hello", {a: 1})
}

/** What the Node SDK computes and sends. */
export async function nodeSdkVectors(){
  const capture = await captureServer()
  const realNow = Date.now
  try {
    const sdk = nodeSdk(capture.port)
    Date.now = () => TIMESTAMP * 1000
    await nodeRequests(sdk)
    Date.now = realNow
    return {...nodeSignatures(sdk), requests: [...capture.requests]}
  } finally {
    Date.now = realNow
    await capture.close()
  }
}

/** What the Python SDK computes and sends (and makes of throng's webhook). */
export async function pythonSdkVectors(){
  const capture = await captureServer()
  try {
    const out = await runPythonJson("sdk_vectors.py",
      [String(capture.port), String(TIMESTAMP), APP.key, APP.secret, FRAMES_FILE], 120000)
    return {...out, requests: [...capture.requests]}
  } finally {
    await capture.close()
  }
}

/** The frames pusher-js and Laravel Echo send, and what they handed the app. */
export async function clientSessions(){
  const {frame} = goldenFrames()
  const sdk = nodeSdk()
  return {"pusher-js": await pusherJsSession(frame, sdk), "laravel-echo": await echoSession(frame, sdk)}
}

/** The whole vectors.json document, recorded now. */
export async function recordVectors(){
  const [node, python, sessions] = [await nodeSdkVectors(), await pythonSdkVectors(), await clientSessions()]
  const {validated_webhook: _v, tampered_webhook: _t, ...pythonVectors} = python
  return {
    about: "Recorded by tests/pusher/vectors.mjs from the pinned pusher (Node), pusher (Python), pusher-js and laravel-echo packages; checked by crates/throng-protocol/tests/pusher_wire.rs and tests/pusher/wire_vectors.test.mjs.",
    app: APP,
    timestamp: TIMESTAMP,
    sdks: {node, python: pythonVectors},
    clients: Object.fromEntries(Object.entries(sessions).map(([name, s]) => [name, s.sent])),
  }
}

if(process.argv[1] === fileURLToPath(import.meta.url) && process.argv.includes("--write")){
  const doc = await recordVectors()
  writeFileSync(VECTORS_FILE, JSON.stringify(doc, null, 2) + "\n")
  console.log(`wrote ${VECTORS_FILE}`)
}
