// A small app backend for the hooks tests (node:http, no framework): it
// answers throng's POST /throng/join and /throng/push as docs/hooks.md's
// contract says, checks every request's x-throng-signature, and tells the
// test what it saw on GET /stats. It takes lifecycle events on POST
// /throng/events (a JSON array; `events` lists every event received, a
// retried one again, with the POST it came in) and answers 500 to the next
// N of them after GET /control?events_fail=N; `openHookConnections` counts the
// connections throng's requests came on that are still open. Run as its own process, so that a test
// can kill it and start it again on the same port:
//   node hook_backend.mjs PORT SECRET   (prints "backend listening on PORT")
// With HOOK_TLS_CERT and HOOK_TLS_KEY (PEM files) it serves HTTPS.
import http from "node:http"
import https from "node:https"
import {readFileSync} from "node:fs"
import {createHmac, timingSafeEqual} from "node:crypto"

const [port = "0", secret = ""] = process.argv.slice(2)
const stats = {verified: 0, forged: 0, joins: [], joinRequests: [], pushes: [], answeredJoins: 0, connects: [], events: [], eventPosts: 0, eventFailures: 0}
let failEvents = 0
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

function signed(body, header){
  const want = Buffer.from("sha256=" + createHmac("sha256", secret).update(body).digest("hex"))
  const got = Buffer.from(header || "")
  return got.length === want.length && timingSafeEqual(got, want)
}

// The connect hook: the `token` param decides.
async function connect(req, response){
  stats.connects.push(req)
  switch(req.params.token){
    case "good": return {user: "42", assigns: {plan: "gold"}}
    case "anon": return {user: null}
    case "error": return {error: {reason: "banned"}}
    case "forbidden": response.writeHead(403); response.end(); return undefined
    case "locked": response.writeHead(403, {"content-type": "application/json"}); response.end(JSON.stringify({error: {reason: "account locked"}})); return undefined
    case "down": response.writeHead(500); response.end(); return undefined
    case "slow": await sleep(5000); return {user: "late"}
    default: return {error: {reason: "no token"}}
  }
}

async function join(req){
  stats.joins.push(req.topic)
  stats.joinRequests.push(req)
  if(req.payload.delay_ms){ await sleep(req.payload.delay_ms) }
  stats.answeredJoins++
  if(req.topic === "rooms:banned"){ return {error: {reason: "banned"}} }
  if(req.topic === "rooms:garbage"){ return "<html>not json" }
  return {reply: {welcome: req.topic, user: req.user, at_seen: typeof req.at === "number"}, assigns: {room: req.topic, joined_by: req.socket_id}}
}

async function push(req){
  stats.pushes.push({event: req.event, n: req.payload.n, ref: req.ref})
  switch(req.event){
    case "new:msg":
      return {
        reply: {saved: true, assigns: req.assigns},
        broadcast: {event: "new:msg", payload: {body: req.payload.body}, exclude_sender: Boolean(req.payload.exclude)},
      }
    case "seq":
      // Later pushes answer faster: an order kept only if throng keeps it.
      await sleep(req.payload.delay_ms || 0)
      return {reply: {n: req.payload.n}}
    case "refuse": return {error: {reason: "nope"}}
    case "garbage": return "<html>not json"
    case "shape": return {reply: 1, assigns: [1, 2]}
    case "slow": await sleep(5000); return {reply: {}}
    default: return {reply: {}}
  }
}

const tls = process.env.HOOK_TLS_CERT
  ? {cert: readFileSync(process.env.HOOK_TLS_CERT), key: readFileSync(process.env.HOOK_TLS_KEY)}
  : null
// The connections throng's hook requests came on, until each closes.
const hookConnections = new Set()
const handler = (request, response) => {
  if(request.url.startsWith("/throng/") && !hookConnections.has(request.socket)){
    hookConnections.add(request.socket)
    request.socket.once("close", () => hookConnections.delete(request.socket))
  }
  const chunks = []
  request.on("data", c => chunks.push(c))
  request.on("end", async () => {
    if(request.method === "GET" && request.url === "/stats"){
      response.writeHead(200, {"content-type": "application/json"})
      return response.end(JSON.stringify({...stats, openHookConnections: hookConnections.size}))
    }
    if(request.method === "GET" && request.url.startsWith("/control?")){
      const q = new URLSearchParams(request.url.slice("/control?".length))
      failEvents = Number(q.get("events_fail") || 0)
      response.writeHead(204)
      return response.end()
    }
    const body = Buffer.concat(chunks)
    if(!signed(body, request.headers["x-throng-signature"])){
      stats.forged++
      response.writeHead(401)
      return response.end("forged")
    }
    stats.verified++
    const req = JSON.parse(body.toString("utf8"))
    let answer
    if(request.url === "/throng/join"){ answer = await join(req) }
    else if(request.url === "/throng/push"){ answer = await push(req) }
    else if(request.url === "/throng/events"){
      const post = ++stats.eventPosts
      const failed = failEvents > 0
      if(failed){ failEvents--; stats.eventFailures++ }
      if(!Array.isArray(req)){ response.writeHead(400); return response.end("not an array") }
      for(const e of req){ stats.events.push({...e, post, failed}) }
      response.writeHead(failed ? 500 : 204)
      return response.end()
    }
    else if(request.url === "/throng/connect"){
      answer = await connect(req, response)
      if(answer === undefined){ return }
    }
    else { response.writeHead(404); return response.end() }
    response.writeHead(200, {"content-type": "application/json"})
    response.end(typeof answer === "string" ? answer : JSON.stringify(answer))
  })
}
const server = tls ? https.createServer(tls, handler) : http.createServer(handler)
server.keepAliveTimeout = 60000
server.listen(Number(port), "127.0.0.1", () => {
  console.log(`backend listening on ${server.address().port}`)
})
