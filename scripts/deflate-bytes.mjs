// Bytes on the wire with and without permessage-deflate (BENCHMARKS.md,
// Compression): starts `throng serve` (THRONG_BIN), joins rooms:lobby with
// one raw client that offers deflate and one that does not, sends the chat
// app's messages and a 1 KiB JSON notification (server API broadcast), and
// prints each frame's size as each client received it.
//   THRONG_BIN=target/release/throng node scripts/deflate-bytes.mjs
import zlib from "node:zlib"
import {startServer, RawWs, OP} from "../tests/e2e/helpers.mjs"

const KEY = "deflate-bytes-script-key"
const server = await startServer(["--api-key", KEY])
const join = async deflate => {
  const ws = await RawWs.connect(server.port, {
    extraHeaders: deflate ? ["Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"] : [],
  })
  ws.sendText(JSON.stringify(["1", "1", "rooms:lobby", "phx_join", {user: "ada"}]))
  const f = await ws.nextFrame()
  return {ws, join: f.payload.length + (f.payload.length < 126 ? 2 : 4)}
}
const frameSize = f => f.payload.length + (f.payload.length < 126 ? 2 : f.payload.length < 65536 ? 4 : 10)
const TAIL = Buffer.from([0, 0, 0xff, 0xff])
const text = f => ((f.rsv & 4)
  ? zlib.inflateRawSync(Buffer.concat([f.payload, TAIL]), {finishFlush: zlib.constants.Z_SYNC_FLUSH})
  : f.payload).toString()
/** The next broadcast of `event` (replies skipped), as received. */
const next = async (ws, event) => {
  for(;;){
    const f = await ws.nextFrame()
    if(f.opcode !== OP.text){ continue }
    const msg = JSON.parse(text(f))
    if(msg[3] === event){ return {size: frameSize(f), compressed: (f.rsv & 4) !== 0} }
  }
}

const z = await join(true)
const p = await join(false)
const rows = [["join reply", p.join, z.join, false]]
const chat = [
  ["chat message, short", "hello everyone, how is it going?"],
  ["chat message, a paragraph (300 chars)", "I pushed the fix for the login redirect to staging; can someone check that the session cookie survives the redirect on Safari too? Last time it did not and we only noticed after the release. If it works I will merge it tonight and tag the release tomorrow morning, after the standup, unless anyone objects."],
]
for(const [label, body] of chat){
  z.ws.sendText(JSON.stringify(["1", "2", "rooms:lobby", "new:msg", {user: "ada", body}]))
  // the sender gets its reply ({"msg": body}) and the broadcast
  const got = await next(z.ws, "new:msg")
  const plain = await next(p.ws, "new:msg")
  rows.push([label, plain.size, got.size, got.compressed])
}
const notification = {
  type: "order.shipped", id: "evt_01HF3Z8Q2W7K4V9N5M6B", created_at: "2026-11-26T10:41:07Z",
  order: {id: "ord_8842", customer: {id: "cus_311", name: "Ada Lovelace", email: "ada@example.com"},
    items: [{sku: "BK-1001", name: "Notes on the Analytical Engine", qty: 1, price_cents: 2900},
      {sku: "BK-1002", name: "Sketch of the Analytical Engine", qty: 2, price_cents: 1900},
      {sku: "PN-0042", name: "Fountain pen, fine nib", qty: 1, price_cents: 4500}],
    shipping: {carrier: "express", tracking: "1Z999AA10123456784", eta: "2026-11-28",
      address: {line1: "12 St James's Square", city: "London", postcode: "SW1Y 4JH", country: "GB"}},
    totals: {subtotal_cents: 11200, shipping_cents: 500, tax_cents: 2340, total_cents: 14040, currency: "GBP"}},
  message: "Your order has shipped and is on its way: the carrier expects to deliver it on Friday between 9:00 and 13:00.",
  links: {order: "https://shop.example.com/orders/ord_8842", tracking: "https://track.example.com/1Z999AA10123456784"},
}
const res = await fetch(`${server.apiUrl}/api/broadcast`, {method: "POST", headers: {"x-api-key": KEY, "content-type": "application/json"},
  body: JSON.stringify({topic: "rooms:lobby", event: "notification", payload: notification})})
if(!res.ok){ throw new Error(`broadcast: HTTP ${res.status}`) }
const zn = await next(z.ws, "notification")
const pn = await next(p.ws, "notification")
rows.push([`JSON notification (${JSON.stringify(notification).length} B payload)`, pn.size, zn.size, zn.compressed])
console.log("| message | plain frame, B | with deflate, B | compressed |")
console.log("|---|---|---|---|")
for(const [label, plain, deflated, compressed] of rows){
  console.log(`| ${label} | ${plain} | ${deflated} | ${compressed ? "yes" : "no (under 256 B)"} |`)
}
z.ws.destroy()
p.ws.destroy()
await server.stop()
