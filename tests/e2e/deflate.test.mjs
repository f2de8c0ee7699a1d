// permessage-deflate (RFC 7692) with real clients: phoenix.js over Node's
// `ws` (which offers deflate by default) gets large broadcasts compressed
// and small ones plain, while a client that offers nothing and a long-poll
// one get the same messages plain; Chromium chats with deflate negotiated;
// a decompression bomb is closed with 1009 without being inflated; and
// `--no-deflate` declines every offer.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {existsSync} from "node:fs"
import zlib from "node:zlib"
import {LongPoll} from "phoenix"
import WebSocket from "ws"
import {
  startServer, RawWs, OP, connectPhoenix, closePhoenix, joinResult, nextEvent, pushResult,
  readMetric, launchChromium, CHROMIUM, withTimeout,
} from "./helpers.mjs"

const OFFER = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"
const AGREED = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
const TAIL = Buffer.from([0x00, 0x00, 0xff, 0xff])

let server

before(async () => { server = await startServer() }, {timeout: 15000})
after(async () => { await server?.stop() }, {timeout: 15000})

/** A raw socket joined to rooms:lobby (v2), offering deflate or not. */
async function rawJoined(port, {deflate}){
  const ws = await RawWs.connect(port, {extraHeaders: deflate ? [OFFER] : []})
  ws.sendText(JSON.stringify(["1", "1", "rooms:lobby", "phx_join", {}]))
  const reply = JSON.parse((await ws.nextMessage()).text)
  assert.equal(reply[3], "phx_reply")
  assert.equal(reply[4].status, "ok")
  return ws
}

/** The next data frame's message, inflated when RSV1 is set: {compressed, msg}. */
async function nextBroadcast(ws){
  for(;;){
    const f = await ws.nextFrame()
    assert.ok(f, "a frame")
    if(f.opcode !== OP.text){ continue }
    const compressed = (f.rsv & 0x4) !== 0
    const body = compressed ? zlib.inflateRawSync(Buffer.concat([f.payload, TAIL]), {finishFlush: zlib.constants.Z_SYNC_FLUSH}) : f.payload
    return {compressed, wire: f.payload.length, msg: JSON.parse(body.toString("utf8"))}
  }
}

/** A `ws` WebSocket class that records the extensions each upgrade answered. */
function recordingTransport(seen){
  return class extends WebSocket {
    constructor(url, protocols){
      super(url, protocols)
      this.on("upgrade", res => seen.push(res.headers["sec-websocket-extensions"] ?? null))
    }
  }
}

test("phoenix.js over ws: large broadcasts arrive compressed, small ones plain; plain and long-poll clients get the same", {timeout: 30000}, async () => {
  const seen = []
  const transport = recordingTransport(seen)
  const alice = await connectPhoenix(server.wsUrl, "2.0.0", {transport})
  const bob = await connectPhoenix(server.wsUrl, "2.0.0", {transport})
  const lp = await connectPhoenix(server.wsUrl, "2.0.0", {transport: LongPoll})
  const zRaw = await rawJoined(server.port, {deflate: true})
  const plainRaw = await rawJoined(server.port, {deflate: false})
  assert.equal(zRaw.handshake.headers["sec-websocket-extensions"], AGREED)
  assert.equal(plainRaw.handshake.headers["sec-websocket-extensions"], undefined, "no offer, no extension")
  try {
    assert.deepEqual(seen, [AGREED, AGREED], "ws's default offer is accepted")
    const chans = [alice, bob, lp].map(s => s.channel("rooms:lobby", {}))
    for(const c of chans){ assert.equal((await joinResult(c)).status, "ok") }
    const [aliceCh, bobCh, lpCh] = chans
    const savedBefore = await readMetric(server.apiUrl, "throng_deflate_bytes_saved_total")
    const inBefore = await readMetric(server.apiUrl, "throng_deflate_messages_in_total")

    // 2 KB: ws compresses what it sends past 1 KiB, so the push arrives
    // compressed and is inflated; the broadcast goes out compressed once.
    const big = Array.from({length: 60}, (_, i) => `line ${i}: the quick brown fox`).join(" / ")
    assert.ok(big.length > 1500)
    const bobGot = nextEvent(bobCh, "new:msg")
    const lpGot = nextEvent(lpCh, "new:msg", 8000)
    assert.equal((await pushResult(aliceCh, "new:msg", {user: "alice", body: big})).status, "ok")
    assert.deepEqual(await bobGot, {user: "alice", body: big})
    assert.deepEqual(await lpGot, {user: "alice", body: big}, "long-poll gets it plain, unchanged")
    const z = await nextBroadcast(zRaw)
    const p = await nextBroadcast(plainRaw)
    assert.ok(z.compressed, "a large broadcast is compressed for a client that negotiated deflate")
    assert.ok(!p.compressed, "and plain for one that did not")
    assert.deepEqual(z.msg, p.msg)
    assert.deepEqual(z.msg[4], {user: "alice", body: big})
    assert.ok(z.wire * 3 < p.wire, `compressed ${z.wire} B vs plain ${p.wire} B`)

    // A short message goes plain even with deflate.
    const bobGot2 = nextEvent(bobCh, "new:msg")
    await pushResult(aliceCh, "new:msg", {user: "alice", body: "hi"})
    assert.deepEqual(await bobGot2, {user: "alice", body: "hi"})
    const small = await nextBroadcast(zRaw)
    assert.ok(!small.compressed, "a short broadcast goes plain")
    assert.deepEqual(small.msg[4], {user: "alice", body: "hi"})
    await nextBroadcast(plainRaw)

    assert.ok(await readMetric(server.apiUrl, "throng_deflate_bytes_saved_total") > savedBefore)
    assert.ok(await readMetric(server.apiUrl, "throng_deflate_messages_in_total") > inBefore,
      "ws's compressed push was inflated")
    assert.ok(await readMetric(server.apiUrl, "throng_deflate_sockets_total") >= 3)
  } finally {
    zRaw.destroy()
    plainRaw.destroy()
    await Promise.all([alice, bob, lp].map(s => closePhoenix(s)))
  }
})

test("a decompression bomb is closed with 1009 before it is inflated", {timeout: 15000}, async () => {
  const before = await readMetric(server.apiUrl, "throng_deflate_too_big_total")
  const ws = await rawJoined(server.port, {deflate: true})
  // 20 MB of one byte compresses to ~20 KB: under --max-message-bytes
  // (64 KiB) on the wire, 300 times over it inflated.
  const bomb = zlib.deflateRawSync(Buffer.alloc(20 << 20, 0x61), {finishFlush: zlib.constants.Z_SYNC_FLUSH})
  assert.ok(bomb.length < 65536, `${bomb.length}`)
  ws.sendFrame({opcode: OP.text, rsv: 0x4, payload: bomb.subarray(0, bomb.length - 4)})
  const {code} = await ws.waitClose()
  assert.equal(code, 1009)
  ws.destroy()
  assert.equal(await readMetric(server.apiUrl, "throng_deflate_too_big_total"), before + 1)
  // The server goes on serving (and inflating) for others.
  const other = await rawJoined(server.port, {deflate: true})
  const push = Buffer.from(JSON.stringify([null, "2", "rooms:lobby", "new:msg", {user: "u", body: "x".repeat(400)}]))
  const c = zlib.deflateRawSync(push, {finishFlush: zlib.constants.Z_SYNC_FLUSH})
  other.sendFrame({opcode: OP.text, rsv: 0x4, payload: c.subarray(0, c.length - 4)})
  const b = await nextBroadcast(other)
  assert.equal(b.msg[4].body, "x".repeat(400))
  other.destroy()
})

test("--no-deflate declines every offer and refuses RSV1", {timeout: 15000}, async () => {
  const plain = await startServer(["--no-deflate"])
  try {
    const seen = []
    const transport = recordingTransport(seen)
    const s = await connectPhoenix(plain.wsUrl, "2.0.0", {transport})
    assert.deepEqual(seen, [null], "no Sec-WebSocket-Extensions in the answer")
    await closePhoenix(s)
    const raw = await rawJoined(plain.port, {deflate: true})
    raw.sendFrame({opcode: OP.text, rsv: 0x4, payload: Buffer.from([0x02, 0x00])})
    assert.equal((await raw.waitClose()).code, 1002)
    raw.destroy()
    assert.equal(await readMetric(plain.apiUrl, "throng_deflate_sockets_total"), 0)
  } finally {
    await plain.stop()
  }
})

test("Chromium chats with deflate negotiated", {timeout: 30000}, async t => {
  if(!existsSync(CHROMIUM)){
    t.skip(`${CHROMIUM} not found: install the Debian package \`chromium\` to run the browser test`)
    return
  }
  const browser = await launchChromium()
  try {
    const open = async user => {
      const context = await browser.newContext()
      const page = await context.newPage()
      const cdp = await context.newCDPSession(page)
      await cdp.send("Network.enable")
      const handshake = new Promise(resolve => cdp.on("Network.webSocketHandshakeResponseReceived", e => resolve(e.response)))
      await page.goto(server.url + "/", {waitUntil: "load", timeout: 10000})
      await page.locator("#status").filter({hasText: "joined"}).waitFor({timeout: 8000})
      await page.fill("#user", user)
      const response = await withTimeout(handshake, 5000, "the WebSocket handshake in Chromium")
      const headers = Object.fromEntries(Object.entries(response.headers).map(([k, v]) => [k.toLowerCase(), v]))
      return {page, extensions: headers["sec-websocket-extensions"]}
    }
    const a = await open("ada")
    const b = await open("bo")
    assert.equal(a.extensions, AGREED, "Chromium's offer is accepted")
    assert.equal(b.extensions, AGREED)
    const before = await readMetric(server.apiUrl, "throng_deflate_messages_out_total")
    const long = "a long chat message that repeats itself, ".repeat(12).trim()
    await a.page.fill("#message", long)
    await a.page.click("#send")
    for(const {page} of [a, b]){
      await page.locator("#messages li", {hasText: `ada: ${long}`}).waitFor({timeout: 5000})
    }
    await b.page.fill("#message", "short")
    await b.page.click("#send")
    await a.page.locator("#messages li", {hasText: "bo: short"}).waitFor({timeout: 5000})
    assert.ok(await readMetric(server.apiUrl, "throng_deflate_messages_out_total") >= before + 2,
      "the long message reached both pages compressed")
  } finally {
    await browser.close().catch(() => {})
  }
})
