// throng chat page: the official Phoenix client talking to the throng server.
import {Socket, LongPoll, Presence} from "phoenix"

const TOPIC = "rooms:lobby"

const byId = id => document.getElementById(id)

function setStatus(el, state, text){
  el.dataset.state = state
  el.textContent = text || state
}

function renderMessage(list, payload){
  const item = document.createElement("li")
  const user = document.createElement("strong")
  user.className = "user"
  const body = document.createElement("span")
  body.className = "body"
  if(payload instanceof ArrayBuffer){
    user.textContent = "binary"
    body.textContent = `[${payload.byteLength} bytes]`
  } else {
    user.textContent = String(payload && payload.user || "anonymous")
    body.textContent = String(payload && payload.body != null ? payload.body : "")
  }
  item.append(user, ": ", body)
  const atBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - 8
  list.appendChild(item)
  if(atBottom){ list.scrollTop = list.scrollHeight }
}

// Who is online (when the server keeps presence for the topic, e.g.
// `throng serve --presence 'rooms:lobby=param:user'`): phoenix.js Presence,
// one item per user, with the number of tabs when more than one.
function renderOnline(el, presence){
  const users = presence.list((user, {metas}) => ({user, tabs: metas.length, status: metas[0].status}))
  users.sort((a, b) => a.user < b.user ? -1 : a.user > b.user ? 1 : 0)
  el.replaceChildren(...users.map(({user, tabs, status}) => {
    const item = document.createElement("li")
    item.dataset.user = user
    item.textContent = user + (tabs > 1 ? ` \u00d7${tabs}` : "") + (status ? ` (${status})` : "")
    return item
  }))
  el.hidden = false
}

function start(){
  const status = byId("status")
  const list = byId("messages")
  const form = byId("composer")
  const userInput = byId("user")
  const messageInput = byId("message")
  const asked = new URLSearchParams(location.search).get("user")
  if(asked){ userInput.value = asked }
  if(!userInput.value){ userInput.value = `guest-${Math.floor(Math.random() * 9000 + 1000)}` }
  const userName = () => userInput.value.trim() || "anonymous"

  // Where WebSockets are blocked (a proxy, a locked-down network), fall
  // back to long-poll (/socket/longpoll): after an error of the first
  // WebSocket attempt, or 2.5 s without one opening. phoenix.js remembers
  // the fallback for the tab's session.
  // With connect auth on (examples/jwt.toml), open the page as
  // /?token=TOKEN (`throng token` mints one): it is sent as authToken.
  const authToken = new URLSearchParams(location.search).get("token") || undefined
  const socket = new Socket("/socket", {params: {}, authToken, longPollFallbackMs: 2500})
  socket.onOpen(() => {
    status.dataset.transport = socket.conn instanceof LongPoll ? "longpoll" : "websocket"
    status.title = `connected over ${status.dataset.transport}`
    setStatus(status, "connected")
  })
  // A browser cannot read why a WebSocket was refused (the 403's body), so
  // after a connect fails the page asks the server once (until the next
  // open) with the same token: GET /socket/check answers what the connect
  // would get, its 403 or 503 with the reason (a token that expired, the
  // app backend's connect hook saying "not logged in"), or 204. At most
  // one small request per failed streak, its text cut to 300 characters.
  let why = ""
  let probed = false
  const showDown = () => setStatus(status, "disconnected", `disconnected, retrying${why ? `: ${why}` : ""}`)
  const askWhy = async () => {
    try {
      const headers = authToken ? {"x-phoenix-authtoken": authToken} : {}
      const res = await fetch("/socket/check?vsn=2.0.0", {headers, cache: "no-store"})
      if(res.status === 204 || res.status === 404){ return }
      const text = (await res.text()).trim().slice(0, 300)
      why = `the server refused the connection (${res.status}): ${text}`
      if(status.dataset.state === "disconnected"){ showDown() }
    } catch(_e){ /* the server is out of reach: the retries say so */ }
  }
  socket.onOpen(() => { why = ""; probed = false })
  socket.onError(() => {
    showDown()
    if(!probed){ probed = true; askWhy() }
  })
  socket.onClose(() => { if(status.dataset.state !== "disconnected"){ setStatus(status, "disconnected") } })

  // The room's channel and its presence. params as a closure, so a rejoin
  // after a reconnect uses the current name; a rename joins again under
  // the new name, so the online list shows it (the presence key is the
  // join's `user` param). With history on the server (`throng serve
  // --history 'rooms:*=100'`) each message's ref is its position: a rejoin
  // sends the last one seen as `since`, and gets what it missed first.
  const room = {channel: null, presence: null}
  let since = null
  const join = () => {
    const channel = socket.channel(TOPIC, () => (since ? {user: userName(), since} : {user: userName()}))
    channel.on("new:msg", (payload, ref) => {
      if(typeof ref === "string"){ since = ref }
      renderMessage(list, payload)
    })
    const presence = new Presence(channel)
    let synced = false
    presence.onSync(() => { synced = true; renderOnline(byId("online"), presence) })
    channel.join()
      .receive("ok", reply => {
        // With an app backend behind throng (examples/backend), the join
        // reply carries who the backend says this socket is, and the
        // room's last messages: shown in place of what the list held, so a
        // rejoin after a reconnect does not repeat them.
        if(reply && typeof reply.user === "string"){
          userInput.value = reply.user
          userInput.readOnly = true
          joinedAs = reply.user
        }
        if(reply && Array.isArray(reply.messages)){
          list.replaceChildren()
          reply.messages.forEach(m => renderMessage(list, m))
        }
        // A rejoin whose missed messages the history no longer holds.
        if(reply && reply.recovered === false){
          const note = document.createElement("li")
          note.className = "notice"
          note.textContent = "some messages sent while you were away are no longer kept"
          list.appendChild(note)
        }
        setStatus(status, "joined")
        // Without presence on the server, say how to turn it on.
        setTimeout(() => { byId("presence-off").hidden = synced || room.channel !== channel }, 2000)
      })
      .receive("error", ({reason} = {}) => setStatus(status, "error", `join failed: ${reason || "unknown"}`))
      .receive("timeout", () => setStatus(status, "error", "join timed out"))
    Object.assign(room, {channel, presence})
    window.throng = {socket, channel, presence}
  }
  join()
  let joinedAs = userName()
  userInput.addEventListener("change", () => {
    if(userName() === joinedAs){ return }
    joinedAs = userName()
    room.channel.leave()
    join()
  })

  form.addEventListener("submit", event => {
    event.preventDefault()
    const body = messageInput.value.trim()
    if(!body){ return }
    // A refused push (a backend's error, a rate limit) says why in the status.
    const channel = room.channel
    channel.push("new:msg", {user: userName(), body})
      .receive("ok", () => { if(status.dataset.state === "error" && channel.state === "joined"){ setStatus(status, "joined") } })
      .receive("error", ({reason} = {}) => setStatus(status, "error", `message not sent: ${reason || "unknown"}`))
      .receive("timeout", () => setStatus(status, "error", "message not sent: no answer"))
    messageInput.value = ""
    messageInput.focus()
  })

  byId("room").textContent = TOPIC
  socket.connect()
}

if(document.readyState === "loading"){
  document.addEventListener("DOMContentLoaded", start)
} else {
  start()
}
