// Malformed and edge-case WebSocket traffic from a raw client (own framing over `net`).
// Every case asserts the exact close code or HTTP status, and then that the server
// still serves a well-behaved client (join + broadcast).
import {describe, test, before, after} from "node:test"
import assert from "node:assert/strict"
import {randomBytes} from "node:crypto"
import {
  startServer, RawWs, RawPhx, RawHttp, OP, encodeFrame, handshakeRequest,
  assertServerServes,
} from "./helpers.mjs"

const T = {timeout: 20000}

let server // default limits
let small // --max-message-bytes 1024 --echo

before(async () => {
  server = await startServer()
  small = await startServer(["--max-message-bytes", "1024", "--echo"])
}, {timeout: 20000})
after(async () => {
  await Promise.all([server?.stop(), small?.stop()])
}, {timeout: 20000})

const v2 = "/socket/websocket?vsn=2.0.0"
const v1 = "/socket/websocket?vsn=1.0.0"

function joinText(joinRef, vsn = "2.0.0"){
  return vsn === "2.0.0"
    ? JSON.stringify([joinRef, joinRef, "rooms:lobby", "phx_join", {user: "frag"}])
    : JSON.stringify({topic: "rooms:lobby", event: "phx_join", payload: {user: "frag"}, ref: joinRef, join_ref: joinRef})
}

/** Opens a WebSocket, lets `act` misbehave, expects a close frame with `code`. */
async function expectClose(srv, code, act, {path = v2} = {}){
  const ws = await RawWs.connect(srv.port, {path})
  try {
    await act(ws)
    const res = await ws.waitClose(5000)
    assert.equal(res.code, code,
      `expected close ${code}, got ${res.code === null ? `no close frame (${res.error?.code || "TCP closed"})` : res.code}` +
      (res.frames.length ? `; frames before: ${JSON.stringify(res.frames.map(f => ({op: f.opcode, data: f.payload.toString("utf8").slice(0, 80)})))}` : ""))
    assert.equal(res.closeFrame.masked, false, "server frames must not be masked")
    assert.ok(await ws.tcpClosed(3000), "server should close the TCP connection after the close handshake")
    return res
  } finally {
    ws.destroy()
  }
}

async function stillServes(srv){
  assert.ok(srv.alive(), `server process died:\n${srv.stderr().slice(-2000)}`)
  await assertServerServes(srv.port)
}

describe("protocol errors close with 1002", () => {
  test("unmasked client frame", T, async () => {
    await expectClose(server, 1002, ws => ws.sendText(joinText("1"), {masked: false}))
    await stillServes(server)
  })

  test("reserved opcode 3", T, async () => {
    await expectClose(server, 1002, ws => ws.sendFrame({opcode: 3, payload: Buffer.from("x")}))
    await stillServes(server)
  })

  test("reserved control opcode 0xB", T, async () => {
    await expectClose(server, 1002, ws => ws.sendFrame({opcode: 0xB, payload: Buffer.alloc(0)}))
    await stillServes(server)
  })

  test("RSV1 bit set without a negotiated extension", T, async () => {
    await expectClose(server, 1002, ws => ws.sendText(joinText("1"), {rsv: 0b100}))
    await stillServes(server)
  })

  test("RSV3 bit set", T, async () => {
    await expectClose(server, 1002, ws => ws.sendText(joinText("1"), {rsv: 0b001}))
    await stillServes(server)
  })

  test("fragmented control frame (ping without FIN)", T, async () => {
    await expectClose(server, 1002, ws => ws.sendFrame({opcode: OP.ping, fin: false, payload: Buffer.from("ab")}))
    await stillServes(server)
  })

  test("control frame longer than 125 bytes", T, async () => {
    await expectClose(server, 1002, ws => ws.sendFrame({opcode: OP.ping, payload: Buffer.alloc(126, 0x61)}))
    await stillServes(server)
  })

  test("64-bit payload length with the most significant bit set", T, async () => {
    await expectClose(server, 1002, ws => ws.send(Buffer.from([0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4])))
    await stillServes(server)
  })

  test("close frame with an invalid code (999)", T, async () => {
    await expectClose(server, 1002, ws => ws.sendClose(999))
    await stillServes(server)
  })

  test("close frame with a reserved code (1005)", T, async () => {
    await expectClose(server, 1002, ws => ws.sendClose(1005))
    await stillServes(server)
  })

  test("close frame with a 1-byte payload", T, async () => {
    await expectClose(server, 1002, ws => ws.sendFrame({opcode: OP.close, payload: Buffer.from([3])}))
    await stillServes(server)
  })

  test("continuation frame without a started message", T, async () => {
    await expectClose(server, 1002, ws => ws.sendFrame({opcode: OP.cont, payload: Buffer.from("[]")}))
    await stillServes(server)
  })

  test("new data frame inside a fragmented message", T, async () => {
    await expectClose(server, 1002, ws => {
      ws.sendFrame({opcode: OP.text, fin: false, payload: Buffer.from("[\"1\",")})
      ws.sendFrame({opcode: OP.text, fin: true, payload: Buffer.from("\"x\"]")})
    })
    await stillServes(server)
  })
})

describe("payload errors", () => {
  test("invalid UTF-8 in a text message closes 1007", T, async () => {
    await expectClose(server, 1007, ws => ws.sendFrame({opcode: OP.text, payload: Buffer.from([0x5b, 0x22, 0xc3, 0x28, 0x22, 0x5d])}))
    await stillServes(server)
  })

  test("invalid UTF-8 split across fragments closes 1007", T, async () => {
    await expectClose(server, 1007, ws => {
      ws.sendFrame({opcode: OP.text, fin: false, payload: Buffer.from([0x5b, 0x22, 0xe2, 0x82])})
      ws.sendFrame({opcode: OP.cont, fin: true, payload: Buffer.from([0x22, 0x5d])})
    })
    await stillServes(server)
  })

  test("close reason with invalid UTF-8 closes 1007", T, async () => {
    await expectClose(server, 1007, ws => ws.sendFrame({opcode: OP.close, payload: Buffer.from([0x03, 0xe8, 0xff, 0xfe])}))
    await stillServes(server)
  })

  test("text that is not JSON closes 1007", T, async () => {
    await expectClose(server, 1007, ws => ws.sendText("this is not json {"))
    await stillServes(server)
  })

  test("v2 JSON of the wrong shape closes 1007", T, async () => {
    await expectClose(server, 1007, ws => ws.sendText(JSON.stringify({topic: "rooms:lobby", event: "phx_join", payload: {}, ref: "1"})))
    await stillServes(server)
  })

  test("v2 array of the wrong length closes 1007", T, async () => {
    await expectClose(server, 1007, ws => ws.sendText(JSON.stringify(["1", "1", "rooms:lobby"])))
    await stillServes(server)
  })

  test("v2 message whose event is not a string closes 1007", T, async () => {
    await expectClose(server, 1007, ws => ws.sendText(JSON.stringify([null, "1", "rooms:lobby", 5, {}])))
    await stillServes(server)
  })

  test("v2 binary frame that is not a valid push closes 1007", T, async () => {
    await expectClose(server, 1007, ws => ws.sendBinary(Buffer.from([0, 5])))
    await stillServes(server)
  })

  test("v1 JSON of the wrong shape closes 1007", T, async () => {
    await expectClose(server, 1007, ws => ws.sendText(JSON.stringify(["1", "1", "rooms:lobby", "phx_join", {}])), {path: v1})
    await stillServes(server)
  })

  test("binary frame of invalid UTF-8 on a v1 socket closes 1007", T, async () => {
    await expectClose(server, 1007, ws => ws.sendBinary(Buffer.from([0, 1, 1, 11, 0xff])), {path: v1})
    await stillServes(server)
  })

  test("binary frame of non-JSON on a socket without vsn (v1) closes 1007", T, async () => {
    await expectClose(server, 1007, ws => ws.sendBinary(Buffer.from("hello")), {path: "/socket/websocket"})
    await stillServes(server)
  })

  test("message over --max-message-bytes (1024) closes 1009", T, async () => {
    const body = "x".repeat(2000)
    await expectClose(small, 1009, ws => ws.sendText(JSON.stringify(["1", "1", "rooms:lobby", "new:msg", {user: "big", body}])))
    await stillServes(small)
  })

  test("fragmented message over --max-message-bytes (1024) in total closes 1009", T, async () => {
    await expectClose(small, 1009, ws => {
      const chunk = Buffer.alloc(600, 0x61)
      ws.sendFrame({opcode: OP.text, fin: false, payload: Buffer.concat([Buffer.from("[\"1\",\"1\",\"rooms:lobby\",\"new:msg\",{\"body\":\""), chunk])})
      ws.sendFrame({opcode: OP.cont, fin: false, payload: chunk})
      ws.sendFrame({opcode: OP.cont, fin: true, payload: Buffer.concat([chunk, Buffer.from("\"}]")])})
    })
    await stillServes(small)
  })

  test("message just under --max-message-bytes (1024) is accepted", T, async () => {
    const c = await RawPhx.connect(small.port)
    try {
      const {join_ref, reply} = await c.join("rooms:lobby", {user: "fits"})
      assert.equal(reply.payload.status, "ok")
      const overhead = JSON.stringify([join_ref, "9", "rooms:lobby", "new:msg", {user: "fits", body: ""}]).length
      const body = "y".repeat(1024 - overhead)
      const text = JSON.stringify([join_ref, "9", "rooms:lobby", "new:msg", {user: "fits", body}])
      assert.equal(Buffer.byteLength(text), 1024)
      c.ws.sendText(text)
      const {match} = await c.nextMatching(m => m.event === "new:msg", 5000, "the 1024-byte broadcast")
      assert.equal(match.payload.body, body)
    } finally {
      c.destroy()
    }
    await stillServes(small)
  })
})

describe("v1 reads JSON from binary frames, as Phoenix's V1 serializer (Tsung sends binary)", () => {
  for(const path of [v1, "/socket/websocket"]){
    test(`join in a binary frame on ${path} gets an ok reply as text`, T, async () => {
      const ws = await RawWs.connect(server.port, {path})
      try {
        ws.sendBinary(Buffer.from(joinText("7", "1.0.0")))
        const m = await ws.nextMessage(5000)
        assert.equal(m.opcode, OP.text, "v1 replies are text frames")
        assert.deepEqual(JSON.parse(m.text),
          {event: "phx_reply", payload: {response: {}, status: "ok"}, ref: "7", topic: "rooms:lobby"})
      } finally {
        ws.destroy()
      }
      await stillServes(server)
    })
  }
})

describe("control frames and fragmentation", () => {
  test("ping is answered with a pong carrying the same payload", T, async () => {
    const ws = await RawWs.connect(server.port)
    try {
      const payload = randomBytes(125)
      ws.sendPing(payload)
      const frame = await ws.nextFrame(5000)
      assert.ok(frame, "connection ended instead of a pong")
      assert.equal(frame.opcode, OP.pong)
      assert.equal(frame.fin, true)
      assert.equal(frame.masked, false)
      assert.deepEqual(frame.payload, payload)
      ws.sendPing(Buffer.alloc(0))
      const empty = await ws.nextFrame(5000)
      assert.equal(empty.opcode, OP.pong)
      assert.equal(empty.payload.length, 0)
    } finally {
      ws.destroy()
    }
    await stillServes(server)
  })

  test("unsolicited pong is ignored", T, async () => {
    const c = await RawPhx.connect(server.port)
    try {
      c.ws.sendFrame({opcode: OP.pong, payload: Buffer.from("hi")})
      const {reply} = await c.join("rooms:lobby", {user: "pong"})
      assert.deepEqual(reply.payload, {status: "ok", response: {}})
    } finally {
      c.destroy()
    }
  })

  test("text message in 3 fragments with a ping interleaved: pong, then the join reply", T, async () => {
    const ws = await RawWs.connect(server.port)
    try {
      const text = Buffer.from(joinText("7"))
      const a = text.subarray(0, 10), b = text.subarray(10, 25), c = text.subarray(25)
      ws.sendFrame({opcode: OP.text, fin: false, payload: a})
      ws.sendFrame({opcode: OP.cont, fin: false, payload: b})
      ws.sendPing(Buffer.from("mid-message"))
      const pong = await ws.nextFrame(5000)
      assert.ok(pong, "connection ended instead of a pong")
      assert.equal(pong.opcode, OP.pong, `expected a pong, got opcode ${pong.opcode}: ${pong.payload}`)
      assert.equal(pong.payload.toString(), "mid-message")
      ws.sendFrame({opcode: OP.cont, fin: true, payload: c})
      const msg = await ws.nextMessage(5000)
      assert.equal(msg.opcode, OP.text)
      assert.deepEqual(JSON.parse(msg.text), ["7", "7", "rooms:lobby", "phx_reply", {status: "ok", response: {}}])
    } finally {
      ws.destroy()
    }
    await stillServes(server)
  })

  test("fragmented message sent byte by byte (in separate TCP writes) is reassembled", T, async () => {
    const ws = await RawWs.connect(server.port)
    try {
      const bytes = Buffer.concat([
        encodeFrame({opcode: OP.text, fin: false, payload: Buffer.from(joinText("8").slice(0, 20))}),
        encodeFrame({opcode: OP.cont, fin: true, payload: Buffer.from(joinText("8").slice(20))}),
      ])
      for(const byte of bytes){
        ws.send(Buffer.from([byte]))
        await new Promise(resolve => setImmediate(resolve))
      }
      const msg = await ws.nextMessage(5000)
      assert.deepEqual(JSON.parse(msg.text), ["8", "8", "rooms:lobby", "phx_reply", {status: "ok", response: {}}])
    } finally {
      ws.destroy()
    }
  })

  test("handshake and first frame in one TCP write", T, async () => {
    const http = await RawHttp.connect(server.port)
    try {
      const key = randomBytes(16).toString("base64")
      const frame = encodeFrame({opcode: OP.text, payload: Buffer.from(joinText("3"))})
      http.send(Buffer.concat([Buffer.from(handshakeRequest({port: server.port, key})), frame]))
      const res = await http.response({head: true})
      assert.equal(res.status, 101)
      const ws = new RawWs(http.sock, http.reader) // the reader holds the bytes after the head
      const msg = await ws.nextMessage(5000)
      assert.deepEqual(JSON.parse(msg.text), ["3", "3", "rooms:lobby", "phx_reply", {status: "ok", response: {}}])
    } finally {
      http.close()
    }
  })

  test("20 messages in one TCP write are all answered, in order", T, async () => {
    const c = await RawPhx.connect(server.port)
    try {
      const frames = []
      for(let i = 1; i <= 20; i++){
        frames.push(encodeFrame({opcode: OP.text, payload: Buffer.from(JSON.stringify([null, `hb${i}`, "phoenix", "heartbeat", {}]))}))
      }
      c.ws.send(Buffer.concat(frames))
      const refs = []
      for(let i = 0; i < 20; i++){ refs.push((await c.next(5000)).ref) }
      assert.deepEqual(refs, Array.from({length: 20}, (_, i) => `hb${i + 1}`))
    } finally {
      c.destroy()
    }
  })

  test("a socket without vsn speaks v1", T, async () => {
    const c = await RawPhx.connect(server.port, null)
    try {
      const {reply} = await c.join("rooms:lobby", {user: "old"})
      assert.deepEqual(JSON.parse(reply.raw), {event: "phx_reply", payload: {status: "ok", response: {}}, ref: "1", topic: "rooms:lobby"})
      assert.deepEqual(Object.keys(JSON.parse(reply.raw)), ["event", "payload", "ref", "topic"])
    } finally {
      c.destroy()
    }
  })

  for(const code of [1000, 4001]){
    test(`client close ${code} is echoed with the same code`, T, async () => {
      const ws = await RawWs.connect(server.port)
      try {
        ws.sendClose(code, "bye")
        const frame = await ws.nextFrame(5000)
        assert.ok(frame, "connection ended without a close frame")
        assert.equal(frame.opcode, OP.close)
        assert.equal(frame.masked, false)
        assert.ok(frame.payload.length >= 2, "close frame without a code")
        assert.equal(frame.payload.readUInt16BE(0), code)
        assert.ok(await ws.tcpClosed(3000), "server should close the TCP connection")
      } finally {
        ws.destroy()
      }
      await stillServes(server)
    })
  }

  test("client close without a code is answered with a close frame", T, async () => {
    const ws = await RawWs.connect(server.port)
    try {
      ws.sendClose()
      const frame = await ws.nextFrame(5000)
      assert.ok(frame, "connection ended without a close frame")
      assert.equal(frame.opcode, OP.close)
      assert.ok(await ws.tcpClosed(3000), "server should close the TCP connection")
    } finally {
      ws.destroy()
    }
    await stillServes(server)
  })

  test("abrupt disconnect mid-frame does not disturb the server", T, async () => {
    const ws = await RawWs.connect(server.port)
    const frame = encodeFrame({opcode: OP.text, payload: Buffer.from(joinText("1"))})
    ws.send(frame.subarray(0, 5))
    ws.destroy()
    await stillServes(server)
  })
})

describe("bad handshakes get an HTTP error response", () => {
  async function handshakeStatus(req){
    const conn = await RawHttp.connect(server.port)
    try {
      conn.send(req)
      return await conn.response({ms: 5000})
    } finally {
      conn.close()
    }
  }
  const key = () => randomBytes(16).toString("base64")

  test("missing Sec-WebSocket-Key -> 400", T, async () => {
    const res = await handshakeStatus(handshakeRequest({port: server.port, key: key(), omit: ["Sec-WebSocket-Key"]}))
    assert.equal(res.status, 400)
    await stillServes(server)
  })

  test("Sec-WebSocket-Version 8 -> 426 with Sec-WebSocket-Version: 13", T, async () => {
    const res = await handshakeStatus(handshakeRequest({port: server.port, key: key(), version: "8"}))
    assert.equal(res.status, 426)
    assert.match(res.headers["sec-websocket-version"] || "", /13/, "426 should advertise Sec-WebSocket-Version: 13")
    await stillServes(server)
  })

  test("POST to /socket/websocket -> 405", T, async () => {
    const res = await handshakeStatus(handshakeRequest({port: server.port, key: key(), method: "POST", extraHeaders: ["Content-Length: 0"]}))
    assert.equal(res.status, 405)
    await stillServes(server)
  })

  test("unsupported vsn=3.0.0 -> 403, as Phoenix refuses a serializer it cannot negotiate", T, async () => {
    const res = await handshakeStatus(handshakeRequest({port: server.port, key: key(), path: "/socket/websocket?vsn=3.0.0"}))
    assert.equal(res.status, 403)
    await stillServes(server)
  })

  test("GET /socket/websocket without Upgrade -> 400", T, async () => {
    const res = await handshakeStatus(handshakeRequest({port: server.port, key: key(), omit: ["Upgrade", "Connection"]}))
    assert.equal(res.status, 400)
    await stillServes(server)
  })

  test("garbage instead of an HTTP request gets 400 or a close, never a hang", T, async () => {
    const conn = await RawHttp.connect(server.port)
    try {
      conn.send("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n")
      let status = null
      try {
        status = (await conn.response({ms: 5000})).status
      } catch(err){
        assert.match(err.message, /closed before a complete HTTP response/, err.message)
      }
      if(status !== null){ assert.equal(status, 400) }
    } finally {
      conn.close()
    }
    await stillServes(server)
  })

  test("WebSocket upgrade on an unknown path -> 404", T, async () => {
    const res = await handshakeStatus(handshakeRequest({port: server.port, key: key(), path: "/nope/websocket"}))
    assert.equal(res.status, 404)
    await stillServes(server)
  })
})

describe("echo endpoint", () => {
  test("with --echo, /echo echoes text and binary messages", T, async () => {
    const ws = await RawWs.connect(small.port, {path: "/echo"})
    try {
      ws.sendText("hello, echo \u00e9")
      const text = await ws.nextMessage(5000)
      assert.equal(text.opcode, OP.text)
      assert.equal(text.text, "hello, echo \u00e9")
      const bytes = randomBytes(200)
      ws.sendBinary(bytes)
      const bin = await ws.nextMessage(5000)
      assert.equal(bin.opcode, OP.binary)
      assert.deepEqual(bin.data, bytes)
      ws.sendClose(1000)
      const res = await ws.waitClose(5000)
      assert.equal(res.code, 1000)
    } finally {
      ws.destroy()
    }
  })

  test("without --echo, /echo -> 404", T, async () => {
    const conn = await RawHttp.connect(server.port)
    try {
      conn.send(handshakeRequest({port: server.port, key: randomBytes(16).toString("base64"), path: "/echo"}))
      const res = await conn.response({ms: 5000})
      assert.equal(res.status, 404)
    } finally {
      conn.close()
    }
  })
})
