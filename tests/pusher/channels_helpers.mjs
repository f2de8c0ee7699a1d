// Helpers for the Pusher channel tests against the real binary: a throng
// with Pusher apps, pusher-js clients (Node) authorized by the official
// `pusher` server SDK, a raw Pusher socket that reads every frame and close
// code, and the webhook backend process (webhook_backend.mjs).
import {spawn} from "node:child_process"
import path from "node:path"
import {fileURLToPath} from "node:url"
import Pusher from "pusher-js"
import PusherServer from "pusher"
import WebSocket from "ws"
import {startServer, withTimeout, deferred} from "../e2e/helpers.mjs"

export {withTimeout, deferred}

export const APP_ID = "1"
export const KEY = "app-key"
export const SECRET = "0123456789abcdef0123"

/** The `pusher` SDK of app 1 at `port`: signs subscriptions, sign-ins and webhooks. */
export function sdk(port, {appId = APP_ID, key = KEY, secret = SECRET} = {}){
  return new PusherServer({appId, key, secret, host: "127.0.0.1", port: String(port), useTLS: false})
}

/** `--pusher-app 1:app-key:SECRET`, then `args`. */
export function appArgs(args = [], {appId = APP_ID, key = KEY, secret = SECRET} = {}){
  return ["--pusher-app", `${appId}:${key}:${secret}`, ...args]
}

/** A throng serving app 1 (and `args`), with its server API on a free port. */
export async function startPusher(args = []){
  return startServer(["--api-bind", "127.0.0.1:0", ...appArgs(args)])
}

/**
 * A pusher-js client (Node, `ws` transport only) of the server at `port`,
 * whose subscriptions the `pusher` SDK authorizes as `user` (presence:
 * {user_id, user_info}). `opts` go to pusher-js.
 */
export function client(port, {user = {user_id: "u1", user_info: {name: "one"}}, key = KEY, secret = SECRET, opts = {}} = {}){
  const server = sdk(port, {key, secret})
  const authorize = ({socketId, channelName}, callback) => {
    const data = channelName.startsWith("presence-") ? user : undefined
    callback(null, server.authorizeChannel(socketId, channelName, data))
  }
  return new Pusher(key, {
    cluster: "mt1", wsHost: "127.0.0.1", wsPort: port, forceTLS: false,
    enabledTransports: ["ws"], disableStats: true,
    channelAuthorization: {customHandler: authorize},
    userAuthentication: {customHandler: ({socketId}, callback) => callback(null, server.authenticateUser(socketId, {id: user.user_id}))},
    ...opts,
  })
}

/** The next `event` on a pusher-js channel or connection, as its data. */
export function once(emitter, event, ms = 5000, pred = () => true){
  return withTimeout(new Promise((resolve) => {
    const handler = (data, meta) => {
      if(!pred(data, meta)){ return }
      emitter.unbind(event, handler)
      resolve(data)
    }
    emitter.bind(event, handler)
  }), ms, `pusher-js ${event}`)
}

/** Resolves once pusher-js's connection is `connected`. */
export function connected(p, ms = 5000){
  if(p.connection.state === "connected"){ return Promise.resolve() }
  return withTimeout(new Promise((resolve) => p.connection.bind("connected", resolve)), ms, "pusher-js to connect")
}

/** Subscribes pusher-js to `name` and waits for pusher:subscription_succeeded (its data). */
export async function subscribed(p, name, ms = 5000){
  const ch = p.subscribe(name)
  const [data] = await Promise.all([once(ch, "pusher:subscription_succeeded", ms)])
  return {ch, data}
}

/** Every `event` a pusher-js channel gets, in order. */
export function record(ch, event){
  const got = []
  ch.bind(event, (data) => got.push(data))
  return got
}

/** Disconnects pusher-js clients. */
export function disconnectAll(clients){
  for(const c of clients){ try { c.disconnect() } catch(_e){ /* gone */ } }
}

/**
 * A raw Pusher socket (`ws`) on `/app/{key}?protocol=7` (or `path`): every
 * frame as JSON in `frames`, `next(pred)` for the next one matching,
 * `closed` with {code, reason}.
 */
export async function rawSocket(port, {key = KEY, path: target, ms = 5000} = {}){
  const url = `ws://127.0.0.1:${port}${target ?? `/app/${key}?protocol=7&client=js&version=8.6.0`}`
  const ws = new WebSocket(url, {maxPayload: 8 << 20})
  const frames = []
  let waiters = []
  const closed = deferred()
  ws.on("message", (data) => {
    let msg
    try { msg = JSON.parse(data.toString("utf8")) } catch(_e){ msg = {raw: data.toString("utf8")} }
    if(typeof msg.data === "string" && msg.data.startsWith("{")){
      try { msg.parsed = JSON.parse(msg.data) } catch(_e){ /* a string */ }
    }
    frames.push(msg)
    const w = waiters
    waiters = []
    w.forEach(f => f())
  })
  ws.on("close", (code, reason) => {
    closed.resolve({code, reason: reason.toString("utf8")})
    const w = waiters
    waiters = []
    w.forEach(f => f())
  })
  ws.on("error", () => {})
  await withTimeout(new Promise((resolve, reject) => { ws.once("open", resolve); ws.once("error", reject) }), ms, `a socket to ${url}`)
  let seen = 0
  const sock = {
    ws, frames, closed: closed.promise,
    send: (obj) => ws.send(typeof obj === "string" || Buffer.isBuffer(obj) ? obj : JSON.stringify(obj)),
    /** The next frame (after those already taken) matching `pred`. */
    next: (pred = () => true, wait = 5000, label = "a frame") => withTimeout(new Promise((resolve, reject) => {
      const look = () => {
        while(seen < frames.length){
          const f = frames[seen++]
          if(pred(f)){ return resolve(f) }
        }
        if(ws.readyState === WebSocket.CLOSED){ return reject(new Error(`closed waiting for ${label}; frames: ${JSON.stringify(frames)}`)) }
        waiters.push(look)
      }
      look()
    }), wait, label),
    event: (name, wait) => sock.next(f => f.event === name, wait, name),
    close: () => { try { ws.terminate() } catch(_e){ /* gone */ } },
  }
  return sock
}

/** A raw socket, connected: its socket id. */
export async function rawConnected(port, opts){
  const sock = await rawSocket(port, opts)
  const est = await sock.event("pusher:connection_established")
  sock.socketId = JSON.parse(est.data).socket_id
  return sock
}

/** `pusher:subscribe` of a raw socket to `channel`, signed by `server` (with presence `user`). */
export function subscribeRaw(sock, server, channel, user){
  const data = {channel}
  if(channel.startsWith("private-") || channel.startsWith("presence-")){
    const auth = server.authorizeChannel(sock.socketId, channel, user)
    data.auth = auth.auth
    if(auth.channel_data){ data.channel_data = auth.channel_data }
  }
  sock.send({event: "pusher:subscribe", data})
}

const BACKEND = path.join(path.dirname(fileURLToPath(import.meta.url)), "webhook_backend.mjs")

/**
 * Starts the webhook backend (a real process) on `port` (0: any): it checks
 * each POST with the `pusher` SDK's webhook verification and appends its
 * events to `file` (JSON lines), so a backend killed and started again
 * keeps what it took. `answer` 500 makes it refuse every POST.
 */
export async function startWebhookBackend(file, port = 0, {answer = 200} = {}){
  const proc = spawn(process.execPath, [BACKEND, String(port), file, String(answer), KEY, SECRET], {stdio: ["ignore", "pipe", "inherit"]})
  const exited = new Promise(resolve => proc.once("exit", resolve))
  const listening = new Promise((resolve, reject) => {
    let out = ""
    proc.stdout.setEncoding("utf8")
    proc.stdout.on("data", chunk => {
      out += chunk
      const m = out.match(/webhooks listening on (\d+)/)
      if(m){ resolve(Number(m[1])) }
    })
    exited.then(code => reject(new Error(`webhook backend exited (${code}) before listening`)))
  })
  let bound
  try {
    bound = await withTimeout(listening, 5000, "the webhook backend to listen")
  } catch(err){
    proc.kill("SIGKILL")
    throw err
  }
  return {
    port: bound,
    url: `http://127.0.0.1:${bound}/pusher/webhooks`,
    kill: async () => {
      if(proc.exitCode === null && proc.signalCode === null){ proc.kill("SIGKILL") }
      await exited
    },
  }
}
