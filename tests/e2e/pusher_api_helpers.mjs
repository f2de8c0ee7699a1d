// Helpers for the Pusher HTTP API tests (tests/e2e/pusher_api.test.mjs,
// tests/cluster/pusher_api.test.mjs): real pusher-js clients (channels signed
// by the official `pusher` server SDK, users signed in through it), the SDK
// itself pointed at the binary, and raw signed requests for the refusals.
import {createHash, createHmac} from "node:crypto"
import net from "node:net"
import Pusher from "pusher-js"
import PusherServer from "pusher"
import {withTimeout} from "./helpers.mjs"

export const APP = {id: "1", key: "app-key", secret: "0123456789abcdef0123"}

/** The `--pusher-app` flag of APP. */
export const APP_FLAG = ["--pusher-app", `${APP.id}:${APP.key}:${APP.secret}`]

/** The official server SDK for APP, against the binary on `port`. */
export function sdk(port){
  return new PusherServer({appId: APP.id, key: APP.key, secret: APP.secret, host: "127.0.0.1", port: String(port), useTLS: false})
}

/**
 * A pusher-js client on `port`, connected; `user` (an id) signs it in and is
 * its presence member. Its events land in `events` ({channel, event, data}).
 */
export async function client(port, {user = null, ms = 10000} = {}){
  const server = sdk(port)
  const member = {user_id: user ?? "anon", user_info: {name: user ?? "anon"}}
  const pusher = new Pusher(APP.key, {
    wsHost: "127.0.0.1", wsPort: port, forceTLS: false, enabledTransports: ["ws"], cluster: "none",
    channelAuthorization: {customHandler: (p, cb) => cb(null, server.authorizeChannel(p.socketId, p.channelName, member))},
    userAuthentication: {customHandler: (p, cb) => cb(null, server.authenticateUser(p.socketId, {id: user}))},
  })
  const events = []
  await withTimeout(new Promise((resolve, reject) => {
    pusher.connection.bind("connected", resolve)
    pusher.connection.bind("failed", () => reject(new Error("pusher-js: failed")))
  }), ms, "pusher-js connected")
  if(user !== null){
    pusher.user.bind_global((event, data) => events.push({channel: null, event, data}))
    pusher.signin()
    // Signed in, and subscribed to the user's own channel.
    await until(() => pusher.user.serverToUserChannel?.subscribed, ms, `${user} signed in`)
  }
  const c = {
    pusher,
    events,
    socketId: () => pusher.connection.socket_id,
    /** Subscribes to `name`; resolves once subscribed. */
    async subscribe(name){
      const ch = pusher.subscribe(name)
      ch.bind_global((event, data) => events.push({channel: name, event, data}))
      await withTimeout(new Promise((resolve, reject) => {
        ch.bind("pusher:subscription_succeeded", resolve)
        ch.bind("pusher:subscription_error", e => reject(new Error(`subscription_error ${JSON.stringify(e)}`)))
      }), ms, `subscribed to ${name}`)
      return ch
    },
    /** The next `event` on `channel` (null: the user's events) received from now on, or one received already. */
    next(channel, event, pred = () => true, wait = ms){
      const seen = events.find(e => e.channel === channel && e.event === event && pred(e.data))
      if(seen){ return Promise.resolve(seen.data) }
      return withTimeout(new Promise(resolve => {
        const target = channel === null ? pusher.user : pusher.channel(channel)
        const cb = data => { if(pred(data)){ target.unbind(event, cb); resolve(data) } }
        target.bind(event, cb)
      }), wait, `${event} on ${channel ?? "the user"}`)
    },
    /** Resolves with the state pusher-js ends in after its socket closes (and the close code). */
    closed(wait = ms){
      const down = ["disconnected", "unavailable"]
      if(down.includes(pusher.connection.state)){ return Promise.resolve(pusher.connection.state) }
      return withTimeout(new Promise(resolve => {
        const cb = s => { if(down.includes(s.current)){ resolve(s.current) } }
        pusher.connection.bind("state_change", cb)
      }), wait, "the socket closed")
    },
    close(){ pusher.disconnect() },
  }
  return c
}

/** Disconnects every client. */
export function closeAll(clients){
  for(const c of clients){ try { c.close() } catch(_e){ /* gone */ } }
}

/**
 * The signed target of a request, as the SDKs sign it; `tweak` changes the
 * parameters after signing ({auth_key, auth_timestamp, body_md5, ...}).
 */
export function signed(method, path, {params = {}, body = null, key = APP.key, secret = APP.secret, timestamp, md5Of = body} = {}){
  const all = {
    ...params,
    auth_key: key,
    auth_timestamp: String(timestamp ?? Math.floor(Date.now() / 1000)),
    auth_version: "1.0",
  }
  if(md5Of !== null){ all.body_md5 = createHash("md5").update(md5Of).digest("hex") }
  const sorted = Object.keys(all).sort().map(k => `${k}=${all[k]}`).join("&")
  const signature = createHmac("sha256", secret).update(`${method}\n${path}\n${sorted}`).digest("hex")
  const q = new URLSearchParams({...all, auth_signature: signature})
  return `${path}?${q}`
}

/** A signed request's {status, body (parsed JSON or text)}. */
export async function call(port, method, path, opts = {}){
  const target = signed(method, path, opts)
  const res = await fetch(`http://127.0.0.1:${port}${target}`, {
    method, body: opts.body ?? undefined, headers: opts.body ? {"content-type": "application/json"} : {},
  })
  const text = await res.text()
  let body = text
  try { body = JSON.parse(text) } catch(_e){ /* text */ }
  return {status: res.status, body}
}

/**
 * Sends only `head` on a raw connection and resolves with what the server
 * answers before closing (the first response), within `ms`.
 */
export function rawHead(port, head, ms = 5000){
  return withTimeout(new Promise((resolve, reject) => {
    const sock = net.connect(port, "127.0.0.1", () => sock.write(head))
    let got = ""
    sock.setEncoding("utf8")
    sock.on("data", d => {
      got += d
      const end = got.indexOf("\r\n\r\n")
      const len = Number((got.match(/content-length: (\d+)/i) ?? [])[1] ?? -1)
      if(end >= 0 && len >= 0 && got.length >= end + 4 + len){ sock.destroy(); resolve(got) }
    })
    sock.on("error", reject)
    sock.on("close", () => resolve(got))
  }), ms, "the answer to a raw head")
}

/** Retries `check` (async, returns a truthy value when done) every 50 ms for `ms`. */
export async function until(check, ms, label){
  const end = Date.now() + ms
  let last
  for(;;){
    try {
      last = await check()
      if(last){ return last }
    } catch(e){ last = e }
    if(Date.now() > end){ throw new Error(`${label}: not within ${ms} ms (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`) }
    await new Promise(r => setTimeout(r, 50))
  }
}
