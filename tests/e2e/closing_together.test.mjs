// Sockets that close in the same instant leave their topics exactly: the
// server API's disconnect of a user closes all of that user's sockets at
// once, and each one's end takes it out of every topic it had joined. A
// socket taking another's place in a topic's subscriber list while that
// other one's end was still to come kept a stale place, so its own end
// removed nobody: the topic stayed with a subscriber nobody held (found by
// `throng bench --soak`: 11 topics left after its clients had gone), and
// the next connection given the same slot received that topic's
// broadcasts without having joined it.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {startServer, RawPhx} from "./helpers.mjs"
import {jwtHS256, nowS} from "./tokens.mjs"

const T = {timeout: 30000}
// 32 bytes: the least an HS256 secret may have.
const SECRET = "closing-together-secret-32-bytes"
const API_KEY = "closing-together-api-key-0123456"

const dir = mkdtempSync(path.join(tmpdir(), "throng-closing-"))
const configFile = path.join(dir, "rooms.toml")
writeFileSync(configFile, `[[topics]]\npattern = "room:*"\n`)

let server
// One shard, so that every socket of the test shares one subscriber list.
before(async () => {
  server = await startServer([
    "--shards", "1", "--auth", "jwt", "--auth-jwt-secret", SECRET, "--api-key", API_KEY, "--config", configFile
  ])
}, {timeout: 20000})
after(async () => { await server?.stop(); rmSync(dir, {recursive: true, force: true}) }, {timeout: 20000})

function api(method, route, body){
  const headers = {"content-type": "application/json", "x-api-key": API_KEY}
  return fetch(`${server.apiUrl}${route}`, {method, headers, body: body && JSON.stringify(body)})
}

async function socketOf(user){
  const token = jwtHS256(SECRET, {sub: user, exp: nowS() + 600})
  return RawPhx.connect(server.port, "2.0.0", {path: `/socket/websocket?vsn=2.0.0&token=${token}`})
}

async function subscribers(){
  return (await (await api("GET", "/api/topics")).json()).topics
}

/** Reads until the server's close frame; returns its code. */
async function closeCode(s){
  return (await s.ws.waitClose(5000)).code
}

test("a user's sockets closed at once all leave their topics, and the slots they free carry no topic", T, async () => {
  // The subscriber list of "room:a" becomes [u, v, u, w, u]: ending the
  // first u moves the last u (still to end) into its place.
  const order = ["u", "v", "u", "w", "u"]
  const sockets = []
  for(const user of order){
    const s = await socketOf(user)
    const r = await s.join("room:a")
    assert.equal(r.reply.payload.status, "ok", JSON.stringify(r.reply.payload))
    sockets.push({user, s})
  }
  assert.equal((await subscribers())["room:a"], 5)

  const res = await api("POST", "/api/disconnect", {user: "u"})
  assert.equal(res.status, 200)
  const gone = sockets.filter(x => x.user === "u")
  assert.deepEqual(await Promise.all(gone.map(x => closeCode(x.s))), [1001, 1001, 1001])
  assert.equal((await subscribers())["room:a"], 2, "v and w are left on room:a")

  // New sockets take the freed slots; none joins room:a, and none gets its
  // broadcasts.
  const fresh = []
  for(let i = 0; i < 3; i++){
    const s = await socketOf(`x${i}`)
    const r = await s.join("room:b")
    assert.equal(r.reply.payload.status, "ok", JSON.stringify(r.reply.payload))
    fresh.push(s)
  }
  assert.equal((await api("POST", "/api/broadcast", {topic: "room:a", event: "note", payload: {n: 1}})).status, 200)
  assert.equal((await api("POST", "/api/broadcast", {topic: "room:b", event: "note", payload: {n: 2}})).status, 200)
  for(const s of fresh){
    const m = await s.nextMatching(m => m.event === "note", 5000, "room:b's broadcast")
    assert.equal(m.skipped.length, 0, `nothing before room:b's broadcast: ${JSON.stringify(m.skipped)}`)
    assert.equal(m.match.topic, "room:b")
  }

  // v and w leave too: room:a is gone.
  for(const x of sockets.filter(x => x.user !== "u")){ x.s.destroy() }
  for(const s of fresh){ s.destroy() }
  for(let i = 0; i < 100; i++){
    const topics = await subscribers()
    if(topics["room:a"] === undefined && topics["room:b"] === undefined){ return }
    await new Promise(r => setTimeout(r, 50))
  }
  assert.fail(`topics left once every socket closed: ${JSON.stringify(await subscribers())}`)
})
