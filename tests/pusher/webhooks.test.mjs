// Pusher webhooks against the real binary and a real backend process
// (webhook_backend.mjs, which checks each POST with the official `pusher`
// SDK): channel_occupied and channel_vacated once per transition,
// member_added and member_removed once per user (not per tab),
// client_event and cache_miss; the backend killed mid-run and started
// again gets every event (retried, not lost).
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {readMetric} from "../e2e/helpers.mjs"
import {waitFor, sleep} from "../cluster/helpers.mjs"
import {
  startPusher, client, connected, subscribed, once, disconnectAll, startWebhookBackend,
} from "./channels_helpers.mjs"

let server
let backend
let file
const clients = []

before(async () => {
  file = path.join(mkdtempSync(path.join(tmpdir(), "throng-webhooks-")), "events.jsonl")
  backend = await startWebhookBackend(file)
  server = await startPusher(["--pusher-webhook-url", backend.url, "--presence-interval", "50"])
}, {timeout: 20000})

after(async () => {
  disconnectAll(clients)
  await server?.stop()
  await backend?.kill()
}, {timeout: 20000})

async function user(id){
  const c = client(server.port, {user: {user_id: id, user_info: {name: id}}})
  clients.push(c)
  await connected(c)
  return c
}

/** Every event the backend took so far. */
async function events(){
  return (await fetch(`http://127.0.0.1:${backend.port}/events`)).json()
}

/** The events about `channel`, as "name" or "name user". */
async function about(channel){
  return (await events()).filter((e) => e.channel === channel).map((e) => e.user_id ? `${e.name} ${e.user_id}` : e.name)
}

test("channel_occupied and channel_vacated: once per transition, however many subscribers", {timeout: 20000}, async () => {
  const a = await user("a")
  const b = await user("b")
  await subscribed(a, "private-rooms")
  await subscribed(b, "private-rooms")
  await waitFor(async () => (await about("private-rooms")).length === 1, 5000, "channel_occupied")
  a.unsubscribe("private-rooms")
  await sleep(300)
  assert.deepEqual(await about("private-rooms"), ["channel_occupied"], "b is still there")
  b.unsubscribe("private-rooms")
  await waitFor(async () => (await about("private-rooms")).length === 2, 5000, "channel_vacated")
  await subscribed(a, "private-rooms")
  await waitFor(async () => (await about("private-rooms")).length === 3, 5000, "channel_occupied again")
  assert.deepEqual(await about("private-rooms"), ["channel_occupied", "channel_vacated", "channel_occupied"])
  const all = await events()
  assert.ok(all.every((e) => !e.invalid), "every POST passed the SDK's signature check")
  assert.ok(all.every((e) => typeof e.time_ms === "number"))
})

test("member_added and member_removed: once per user, not per tab", {timeout: 20000}, async () => {
  const channel = "presence-hooks"
  const tab1 = await user("ua")
  const tab2 = await user("ua")
  const other = await user("ub")
  await subscribed(tab1, channel)
  await subscribed(tab2, channel)
  await subscribed(other, channel)
  await waitFor(async () => (await about(channel)).includes("member_added ub"), 5000, "member_added ub")
  tab1.unsubscribe(channel)
  await sleep(300)
  assert.deepEqual((await about(channel)).filter((e) => e.includes("ua")), ["member_added ua"])
  tab2.disconnect()
  await waitFor(async () => (await about(channel)).includes("member_removed ua"), 5000, "member_removed ua")
  other.unsubscribe(channel)
  await waitFor(async () => (await about(channel)).includes("channel_vacated"), 5000, "channel_vacated")
  const got = await about(channel)
  assert.deepEqual(got.filter((e) => e.includes("ua")), ["member_added ua", "member_removed ua"])
  assert.deepEqual(got.filter((e) => e.includes("ub")), ["member_added ub", "member_removed ub"])
  assert.equal(got[0], "channel_occupied")
  assert.equal(got.at(-1), "channel_vacated")
})

test("client_event (with the sender's socket_id, and user_id on presence) and cache_miss", {timeout: 20000}, async () => {
  const a = await user("ca")
  const b = await user("cb")
  const pa = (await subscribed(a, "presence-talk")).ch
  const pb = (await subscribed(b, "presence-talk")).ch
  const got = once(pb, "client-hello")
  pa.trigger("client-hello", {hi: 1})
  await got
  await waitFor(async () => (await events()).some((e) => e.name === "client_event"), 5000, "client_event")
  const e = (await events()).find((x) => x.name === "client_event")
  assert.equal(e.channel, "presence-talk")
  assert.equal(e.event, "client-hello")
  assert.equal(e.data, JSON.stringify({hi: 1}))
  assert.equal(e.socket_id, a.connection.socket_id)
  assert.equal(e.user_id, "ca")
  const c = a.subscribe("cache-quotes")
  await once(c, "pusher:cache_miss")
  await waitFor(async () => (await about("cache-quotes")).includes("cache_miss"), 5000, "cache_miss")
})

test("a webhook backend killed mid-run and started again gets every event: retried, not lost", {timeout: 40000}, async () => {
  const port = backend.port
  await backend.kill()
  const a = await user("k")
  // Ten channels occupied and vacated while the backend is down.
  for(let i = 0; i < 10; i++){
    await subscribed(a, `private-down-${i}`)
    a.unsubscribe(`private-down-${i}`)
  }
  const retried = () => readMetric(server.apiUrl, "throng_pusher_webhook_retries_total")
  await waitFor(async () => Number(await retried()) > 0, 10000, "a failed POST to be retried")
  backend = await startWebhookBackend(file, port)
  await waitFor(async () => {
    const all = await events()
    return Array.from({length: 10}, (_, i) => `private-down-${i}`)
      .every((ch) => all.filter((e) => e.channel === ch).length === 2)
  }, 20000, "every event of the downtime")
  const all = await events()
  for(let i = 0; i < 10; i++){
    const names = all.filter((e) => e.channel === `private-down-${i}`).map((e) => e.name)
    assert.deepEqual(names, ["channel_occupied", "channel_vacated"], `private-down-${i}`)
  }
  assert.equal(Number(await readMetric(server.apiUrl, "throng_pusher_webhook_events_dropped_total")), 0)
  assert.ok(Number(await readMetric(server.apiUrl, "throng_pusher_webhook_events_sent_total")) >= 20)
  assert.equal(Number(await readMetric(server.apiUrl, "throng_pusher_webhook_events_queued")), 0)
})
