// Real pusher-js and Laravel Echo sessions against a stand-in server that
// answers with throng's own encoded frames (tests/pusher/server_frames.json,
// byte for byte what crates/throng-protocol's encoders write). Each session
// returns what the client library handed the app (to check that pusher-js
// accepts every frame) and every frame the client sent (recorded into
// tests/pusher/vectors.json, which the Rust test decodes).
import {readFileSync} from "node:fs"
import path from "node:path"
import Pusher from "pusher-js"
import Echo from "laravel-echo"
import {WebSocketServer} from "ws"
import {REPO_ROOT, deferred, withTimeout} from "../e2e/helpers.mjs"

export const FRAMES_FILE = path.join(REPO_ROOT, "tests/pusher/server_frames.json")

/** server_frames.json, with its frames by name. */
export function goldenFrames(){
  const doc = JSON.parse(readFileSync(FRAMES_FILE, "utf8"))
  return {doc, frame: Object.fromEntries(doc.frames.map((f) => [f.name, f.frame]))}
}

/** What the stand-in server answers to each subscription, by channel. */
const ON_SUBSCRIBE = {
  "my-channel": ["subscribed_public", "event_from_api", "event_plain_text"],
  "private-chat": ["subscribed_private", "client_event_private"],
  "presence-room": ["subscribed_presence", "member_added", "member_removed", "client_event_presence"],
  "private-secret": ["subscription_error"],
  "cache-weather": ["subscribed_cache", "cache_miss", "event_to_cache_channel"],
  "#server-to-user-12345": ["subscribed_user", "event_to_user"],
}

/**
 * A WebSocket server on 127.0.0.1:0 speaking with golden frames: it sends
 * connection_established, answers subscriptions (ON_SUBSCRIBE), sign-ins and
 * pings, and after an unsubscribe from my-channel sends a pusher:error 4300
 * and a ping. `sent` collects every client frame; `pong` resolves on the
 * client's pong.
 */
export async function standInServer(frame){
  const wss = new WebSocketServer({host: "127.0.0.1", port: 0})
  await new Promise((resolve) => wss.once("listening", resolve))
  const sent = []
  const pong = deferred()
  wss.on("connection", (ws) => {
    const send = (names) => { for(const n of names){ ws.send(frame[n]) } }
    send(["connection_established"])
    ws.on("message", (data) => {
      const text = data.toString("utf8")
      sent.push(text)
      const msg = JSON.parse(text)
      if(msg.event === "pusher:subscribe"){ send(ON_SUBSCRIBE[msg.data.channel] ?? []) }
      if(msg.event === "pusher:signin"){ send(["signin_success"]) }
      if(msg.event === "pusher:ping"){ send(["pong"]) }
      if(msg.event === "pusher:pong"){ pong.resolve() }
      if(msg.event === "pusher:unsubscribe" && msg.data.channel === "my-channel"){ send(["error_bad_request", "ping"]) }
    })
  })
  return {
    port: wss.address().port,
    sent,
    pong: pong.promise,
    close: () => new Promise((resolve) => { for(const c of wss.clients){ c.terminate() } wss.close(resolve) }),
  }
}

/** The first `event` on a pusher-js emitter, as [data, metadata]. */
export function once(emitter, event, ms = 5000){
  return withTimeout(new Promise((resolve) => {
    const handler = (data, meta) => { emitter.unbind(event, handler); resolve([data, meta]) }
    emitter.bind(event, handler)
  }), ms, `pusher-js ${event}`)
}

/** A pusher-js client of the stand-in server, authorized by the `pusher` Node SDK. */
export function pusherClient(port, sdk){
  return new Pusher(sdk.config.token.key, {
    cluster: "mt1", wsHost: "127.0.0.1", wsPort: port, forceTLS: false,
    enabledTransports: ["ws"], disableStats: true,
    channelAuthorization: {
      customHandler: ({socketId, channelName}, callback) => callback(null, sdk.authorizeChannel(socketId, channelName,
        channelName.startsWith("presence-") ? {user_id: "1", user_info: {name: "Ann"}} : undefined)),
    },
    userAuthentication: {
      customHandler: ({socketId}, callback) => callback(null, sdk.authenticateUser(socketId, {id: "12345", name: "Ann"})),
    },
  })
}

/** Subscribes to `name` with handlers bound first (the server answers at once); their results. */
async function subscribed(pusher, name, events){
  const channel = pusher.channel(name) ?? pusher.channels.add(name, pusher)
  const waits = events.map((e) => once(channel, e))
  pusher.subscribe(name)
  return {channel, got: await Promise.all(waits)}
}

/** A pusher-js session through every frame; what the app saw, and what the client sent. */
export async function pusherJsSession(frame, sdk){
  const server = await standInServer(frame)
  const pusher = pusherClient(server.port, sdk)
  try {
    const seen = {}
    await once(pusher.connection, "connected")
    seen.socketId = pusher.connection.socket_id
    seen.public = (await subscribed(pusher, "my-channel", ["new-message", "notice"])).got.map(([d]) => d)
    const priv = await subscribed(pusher, "private-chat", ["pusher:subscription_succeeded", "client-typing"])
    seen.private = priv.got[1][0]
    priv.channel.trigger("client-typing", {typing: true})
    const presence = await subscribed(pusher, "presence-room",
      ["pusher:subscription_succeeded", "pusher:member_added", "pusher:member_removed", "client-typing"])
    const [[members], [added], [removed], [typing, meta]] = presence.got
    seen.presence = {count: members.count, me: members.me, three: members.get("ü \"3\""), added, removed, typing, meta}
    presence.channel.trigger("client-typing", {typing: false})
    seen.subscriptionError = (await subscribed(pusher, "private-secret", ["pusher:subscription_error"])).got[0][0]
    seen.cache = (await subscribed(pusher, "cache-weather", ["pusher:cache_miss", "weather"])).got.map(([d]) => d ?? null)
    const hello = once(pusher.user, "hello")
    pusher.signin()
    seen.toUser = (await hello)[0]
    seen.userData = pusher.user.user_data
    const error = once(pusher.connection, "error")
    pusher.unsubscribe("my-channel")
    seen.error = (await error)[0]
    await withTimeout(server.pong, 5000, "the client's pong")
    seen.stateAfterError = pusher.connection.state
    return {seen, sent: [...server.sent]}
  } finally {
    pusher.disconnect()
    await server.close()
  }
}

/** A Laravel Echo session (broadcaster "pusher") over pusher-js; what the app saw, and what the client sent. */
export async function echoSession(frame, sdk){
  const server = await standInServer(frame)
  const client = pusherClient(server.port, sdk)
  const echo = new Echo({broadcaster: "pusher", client})
  try {
    const seen = {}
    await once(client.connection, "connected")
    seen.message = await withTimeout(new Promise((resolve) => echo.channel("my-channel").listen(".new-message", resolve)), 5000, "Echo .new-message")
    const chat = echo.private("chat")
    seen.whisper = await withTimeout(new Promise((resolve) => chat.listenForWhisper("typing", resolve)), 5000, "Echo whisper")
    chat.whisper("typing", {typing: true})
    const room = echo.join("room")
    const [here, joining, leaving] = await withTimeout(Promise.all([
      new Promise((resolve) => room.here(resolve)),
      new Promise((resolve) => room.joining(resolve)),
      new Promise((resolve) => room.leaving(resolve)),
    ]), 5000, "Echo presence")
    Object.assign(seen, {here, joining, leaving})
    room.whisper("typing", {typing: false})
    echo.leave("room")
    echo.leaveChannel("private-chat")
    const error = once(client.connection, "error")
    echo.leaveChannel("my-channel")
    seen.error = (await error)[0]
    await withTimeout(server.pong, 5000, "the client's pong")
    return {seen, sent: [...server.sent]}
  } finally {
    echo.disconnect()
    await server.close()
  }
}
