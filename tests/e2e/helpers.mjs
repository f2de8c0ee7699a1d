// Shared helpers for the end-to-end tests: starting the server, a minimal raw
// WebSocket client over `net` (own framing, so malformed input can be sent),
// a raw HTTP client, and Phoenix client glue for node.
import assert from "node:assert/strict"
import {spawn} from "node:child_process"
import {existsSync} from "node:fs"
import net from "node:net"
import path from "node:path"
import {createHash, randomBytes} from "node:crypto"
import {fileURLToPath} from "node:url"
import {Socket} from "phoenix"
import WebSocket from "ws"

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
export const THRONG_BIN = process.env.THRONG_BIN
  ? path.resolve(REPO_ROOT, process.env.THRONG_BIN)
  : path.join(REPO_ROOT, "target/release/throng")

/** Debian's Chromium (or CHROMIUM_PATH), for the browser tests. */
export const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium"

/**
 * Headless Chromium through playwright-core, with the flags this machine's
 * closed network needs (no background fetches, no QUIC, no sync): without
 * them Chromium keeps trying Google's hosts and gets refused.
 */
export async function launchChromium(){
  const {chromium} = await import("playwright-core")
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    timeout: 15000,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  })
}

/**
 * The value of one line of a node's /metrics (`name` plus `labels` such as
 * `{hook="push"}`), at `apiUrl` (a started server's `apiUrl`); fails the
 * test when the line is missing.
 */
export async function readMetric(apiUrl, name, labels = ""){
  const text = await (await fetch(`${apiUrl}/metrics`)).text()
  const line = text.split("\n").find(l => l.startsWith(`${name}${labels} `))
  assert.ok(line, `${name}${labels} not in /metrics`)
  return Number(line.split(" ").pop())
}

/** The reply to a phoenix.js push: {status: "ok"|"error", response} or {status: "timeout"}. */
export function pushResult(channel, event, payload, ms = 5000){
  return withTimeout(new Promise(resolve => {
    channel.push(event, payload)
      .receive("ok", response => resolve({status: "ok", response}))
      .receive("error", response => resolve({status: "error", response}))
      .receive("timeout", () => resolve({status: "timeout"}))
  }), ms, `reply to ${event}`)
}

/**
 * What a network that blocks WebSockets looks like to a page: every
 * WebSocket fails to open (an error, then a close with 1006), as behind a
 * proxy that refuses the upgrade. Give it to `page.addInitScript`, which
 * runs it (self-contained, as it is serialized) before the page's scripts.
 */
export function blockWebSockets(){
  class BlockedWebSocket {
    constructor(url){
      this.url = url
      this.readyState = 0
      this.bufferedAmount = 0
      setTimeout(() => {
        this.readyState = 3
        if(this.onerror){ this.onerror(new Event("error")) }
        if(this.onclose){ this.onclose(new CloseEvent("close", {code: 1006, reason: "", wasClean: false})) }
      }, 0)
    }
    send(){ throw new DOMException("WebSocket is not open", "InvalidStateError") }
    close(){ this.readyState = 3 }
  }
  Object.assign(BlockedWebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3})
  window.WebSocket = BlockedWebSocket
}

export const WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// ---------------------------------------------------------------------------
// generic async helpers

/** Rejects with a labelled error when `promise` does not settle within `ms`. */
export function withTimeout(promise, ms, label = "operation"){
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${label}`)), ms)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

/** A promise with its resolve/reject exposed. */
export function deferred(){
  let resolve, reject
  const promise = new Promise((res, rej) => { resolve = res; reject = rej })
  return {promise, resolve, reject}
}

// ---------------------------------------------------------------------------
// the server process

// servers still running when this test process exits (e.g. killed by a runner timeout
// or a crash before `after`) are killed with it
const liveServers = new Set()
process.on("exit", () => {
  for(const proc of liveServers){ try { proc.kill("SIGKILL") } catch(_e){ /* gone */ } }
})

/**
 * Spawns `throng serve --port 0 --bind 127.0.0.1 ...extraArgs` and waits (10 s at most)
 * for its `listening on HOST:PORT` line on stdout.
 * Returns {port, host, url, wsUrl, proc, stderr(), stop()}.
 */
export async function startServer(extraArgs = []){
  if(!existsSync(THRONG_BIN)){
    throw new Error(`server binary not found at ${THRONG_BIN}: run \`cargo build --release -p throng\` or set THRONG_BIN`)
  }
  const args = ["serve", "--port", "0", "--bind", "127.0.0.1", ...extraArgs]
  const proc = spawn(THRONG_BIN, args, {cwd: REPO_ROOT, stdio: ["ignore", "pipe", "pipe"]})
  let stderrText = ""
  let stdoutText = ""
  proc.stderr.setEncoding("utf8")
  proc.stderr.on("data", chunk => {
    stderrText += chunk
    if(stderrText.length > 64 * 1024){ stderrText = stderrText.slice(-32 * 1024) }
  })
  liveServers.add(proc)
  const exited = new Promise(resolve => proc.once("exit", (code, signal) => {
    liveServers.delete(proc)
    resolve({code, signal})
  }))

  const listening = new Promise((resolve, reject) => {
    proc.stdout.setEncoding("utf8")
    proc.stdout.on("data", chunk => {
      stdoutText += chunk
      const match = stdoutText.match(/^listening on (\S+):(\d+)$/m)
      const api = stdoutText.match(/^api at (\S+):(\d+)$/m)
      if(match){ resolve({host: match[1], port: Number(match[2]), apiPort: api ? Number(api[2]) : null}) }
    })
    proc.once("error", reject)
    exited.then(({code, signal}) => reject(new Error(
      `server exited (code ${code}, signal ${signal}) before listening\nstdout: ${stdoutText}\nstderr: ${stderrText}`)))
  })

  const stop = async () => {
    if(proc.exitCode !== null || proc.signalCode !== null){ return exited }
    proc.kill("SIGTERM")
    const timer = setTimeout(() => { try { proc.kill("SIGKILL") } catch(_e){ /* gone */ } }, 3000)
    try { return await exited } finally { clearTimeout(timer) }
  }

  let info
  try {
    info = await withTimeout(listening, 10000, "the server's `listening on` line")
  } catch(err){
    await stop()
    throw err
  }
  // keep draining stdout so the server never blocks on a full pipe
  proc.stdout.resume()
  const host = info.host === "0.0.0.0" || info.host === "[::]" ? "127.0.0.1" : info.host.replace(/^\[|\]$/g, "")
  return {
    host,
    port: info.port,
    /** the server API's port (`api at` line), null with --api-bind none */
    apiPort: info.apiPort,
    apiUrl: info.apiPort ? `http://127.0.0.1:${info.apiPort}` : null,
    url: `http://${host}:${info.port}`,
    wsUrl: `ws://${host}:${info.port}`,
    proc,
    stderr: () => stderrText,
    stop,
    alive: () => proc.exitCode === null && proc.signalCode === null,
  }
}

// ---------------------------------------------------------------------------
// a byte stream reader over a net.Socket

class ByteReader {
  constructor(sock){
    this.sock = sock
    this.buf = Buffer.alloc(0)
    this.ended = false
    this.error = null
    this.waiters = []
    sock.on("data", chunk => { this.buf = Buffer.concat([this.buf, chunk]); this.wake() })
    sock.on("end", () => { this.ended = true; this.wake() })
    sock.on("close", () => { this.ended = true; this.wake() })
    sock.on("error", err => { this.error = err; this.ended = true; this.wake() })
  }

  wake(){
    const waiters = this.waiters
    this.waiters = []
    waiters.forEach(fn => fn())
  }

  /** Resolves once `check(buf)` returns a non-undefined value, or the stream ended. */
  async until(check, ms, label){
    const started = Date.now()
    for(;;){
      const result = check(this.buf)
      if(result !== undefined){ return result }
      if(this.ended){ return undefined }
      const left = ms - (Date.now() - started)
      if(left <= 0){ throw new Error(`timed out after ${ms} ms waiting for ${label}`) }
      await withTimeout(new Promise(resolve => this.waiters.push(resolve)), left, label)
    }
  }

  take(n){
    const out = this.buf.subarray(0, n)
    this.buf = this.buf.subarray(n)
    return out
  }
}

function connectTcp(port, host = "127.0.0.1", ms = 5000){
  return withTimeout(new Promise((resolve, reject) => {
    const sock = net.connect({port, host}, () => resolve(sock))
    sock.once("error", reject)
  }), ms, `TCP connect to ${host}:${port}`)
}

// ---------------------------------------------------------------------------
// raw HTTP

/** Parses one HTTP/1.1 response at the start of `buf`; returns undefined if incomplete. */
function parseHttpResponse(buf, {ended = false, head = false} = {}){
  const headerEnd = buf.indexOf("\r\n\r\n")
  if(headerEnd < 0){ return undefined }
  const headText = buf.subarray(0, headerEnd).toString("latin1")
  const [statusLine, ...lines] = headText.split("\r\n")
  const m = statusLine.match(/^HTTP\/(\d\.\d) (\d{3})(?: (.*))?$/)
  if(!m){ throw new Error(`bad HTTP status line: ${JSON.stringify(statusLine)}`) }
  const headers = {}
  for(const line of lines){
    const i = line.indexOf(":")
    if(i > 0){
      const name = line.slice(0, i).trim().toLowerCase()
      const value = line.slice(i + 1).trim()
      headers[name] = name in headers ? `${headers[name]}, ${value}` : value
    }
  }
  const status = Number(m[2])
  const bodyStart = headerEnd + 4
  const result = (body, consumed) => ({version: m[1], status, reason: m[3] || "", headers, body, consumed, headText})
  const noBody = head || status === 101 || status === 204 || status === 304 || (status >= 100 && status < 200)
  if(noBody){ return result(Buffer.alloc(0), bodyStart) }
  if(/chunked/i.test(headers["transfer-encoding"] || "")){
    let offset = bodyStart
    const parts = []
    for(;;){
      const lineEnd = buf.indexOf("\r\n", offset)
      if(lineEnd < 0){ return undefined }
      const size = parseInt(buf.subarray(offset, lineEnd).toString("latin1"), 16)
      if(Number.isNaN(size)){ throw new Error("bad chunk size") }
      if(size === 0){
        const trailerEnd = buf.indexOf("\r\n\r\n", lineEnd)
        if(trailerEnd < 0){ return undefined }
        return result(Buffer.concat(parts), trailerEnd + 4)
      }
      if(buf.length < lineEnd + 2 + size + 2){ return undefined }
      parts.push(buf.subarray(lineEnd + 2, lineEnd + 2 + size))
      offset = lineEnd + 2 + size + 2
    }
  }
  if("content-length" in headers){
    const len = Number(headers["content-length"])
    if(buf.length < bodyStart + len){ return undefined }
    return result(buf.subarray(bodyStart, bodyStart + len), bodyStart + len)
  }
  // no framing: the body runs to the end of the connection
  if(!ended){ return undefined }
  return result(buf.subarray(bodyStart), buf.length)
}

/**
 * A raw HTTP/1.1 connection: send any bytes, read responses one by one.
 */
export class RawHttp {
  static async connect(port, host = "127.0.0.1"){
    const sock = await connectTcp(port, host)
    return new RawHttp(sock)
  }

  constructor(sock){
    this.sock = sock
    this.reader = new ByteReader(sock)
  }

  send(data){ this.sock.write(data) }

  /** Reads the next response (`head: true` for a response to HEAD, which has no body). */
  async response({head = false, ms = 5000} = {}){
    const res = await this.reader.until(
      buf => parseHttpResponse(buf, {head, ended: false}), ms, "an HTTP response")
    if(res){ this.reader.take(res.consumed); return res }
    const last = parseHttpResponse(this.reader.buf, {head, ended: true})
    if(last){ this.reader.take(last.consumed); return last }
    throw new Error(`connection closed before a complete HTTP response (got ${JSON.stringify(this.reader.buf.toString("latin1").slice(0, 200))})`)
  }

  /** Resolves true once the server closed the connection (within ms), false otherwise. */
  async closedByServer(ms = 2000){
    try {
      await this.reader.until(() => undefined, ms, "server close")
      return true
    } catch(_e){
      return false
    }
  }

  close(){ this.sock.destroy() }
}

/** One request on a fresh connection; returns the parsed response. */
export async function httpRequest(port, method, target, {headers = {}, body = null, host = "127.0.0.1"} = {}){
  const conn = await RawHttp.connect(port, host)
  try {
    const lines = [`${method} ${target} HTTP/1.1`, `Host: ${host}:${port}`]
    for(const [k, v] of Object.entries(headers)){ lines.push(`${k}: ${v}`) }
    if(body !== null){ lines.push(`Content-Length: ${Buffer.byteLength(body)}`) }
    conn.send(lines.join("\r\n") + "\r\n\r\n" + (body ?? ""))
    return await conn.response({head: method === "HEAD"})
  } finally {
    conn.close()
  }
}

// ---------------------------------------------------------------------------
// raw WebSocket framing (RFC 6455)

export const OP = {cont: 0x0, text: 0x1, binary: 0x2, close: 0x8, ping: 0x9, pong: 0xA}

/**
 * Encodes a single frame. Everything can be set, including invalid combinations:
 * fin, rsv (3 bits), opcode, masked, maskKey, and `length` to lie about the payload length.
 */
export function encodeFrame({fin = true, rsv = 0, opcode, payload = Buffer.alloc(0), masked = true, maskKey, length}){
  payload = Buffer.isBuffer(payload) ? payload : Buffer.from(payload)
  const len = length ?? payload.length
  let header
  if(len < 126){
    header = Buffer.alloc(2)
    header[1] = len
  } else if(len < 65536){
    header = Buffer.alloc(4)
    header[1] = 126
    header.writeUInt16BE(len, 2)
  } else {
    header = Buffer.alloc(10)
    header[1] = 127
    header.writeBigUInt64BE(BigInt(len), 2)
  }
  header[0] = (fin ? 0x80 : 0) | ((rsv & 0x7) << 4) | (opcode & 0xF)
  if(!masked){ return Buffer.concat([header, payload]) }
  header[1] |= 0x80
  const key = maskKey ?? randomBytes(4)
  const body = Buffer.alloc(payload.length)
  for(let i = 0; i < payload.length; i++){ body[i] = payload[i] ^ key[i & 3] }
  return Buffer.concat([header, key, body])
}

/** Decodes one frame at the start of buf, or returns undefined when incomplete. */
export function decodeFrame(buf){
  if(buf.length < 2){ return undefined }
  const fin = (buf[0] & 0x80) !== 0
  const rsv = (buf[0] >> 4) & 0x7
  const opcode = buf[0] & 0xF
  const masked = (buf[1] & 0x80) !== 0
  let len = buf[1] & 0x7F
  let offset = 2
  if(len === 126){
    if(buf.length < 4){ return undefined }
    len = buf.readUInt16BE(2)
    offset = 4
  } else if(len === 127){
    if(buf.length < 10){ return undefined }
    len = Number(buf.readBigUInt64BE(2))
    offset = 10
  }
  let key = null
  if(masked){
    if(buf.length < offset + 4){ return undefined }
    key = buf.subarray(offset, offset + 4)
    offset += 4
  }
  if(buf.length < offset + len){ return undefined }
  let payload = Buffer.from(buf.subarray(offset, offset + len))
  if(key){ for(let i = 0; i < payload.length; i++){ payload[i] ^= key[i & 3] } }
  return {fin, rsv, opcode, masked, payload, size: offset + len}
}

export function closePayload(code, reason = ""){
  const reasonBytes = Buffer.from(reason, "utf8")
  const out = Buffer.alloc(2 + reasonBytes.length)
  out.writeUInt16BE(code, 0)
  reasonBytes.copy(out, 2)
  return out
}

export function handshakeRequest({port, path: target = "/socket/websocket?vsn=2.0.0", key, method = "GET", version = "13", extraHeaders = [], omit = []}){
  const headers = [
    ["Host", `127.0.0.1:${port}`],
    ["Upgrade", "websocket"],
    ["Connection", "Upgrade"],
    ["Sec-WebSocket-Key", key],
    ["Sec-WebSocket-Version", version],
  ].filter(([name]) => !omit.includes(name))
  const lines = [`${method} ${target} HTTP/1.1`, ...headers.map(([k, v]) => `${k}: ${v}`), ...extraHeaders]
  return lines.join("\r\n") + "\r\n\r\n"
}

/**
 * A minimal WebSocket client over node's `net`, with its own framing, so that any
 * (malformed) bytes can be sent and every server frame is seen as is.
 */
export class RawWs {
  /**
   * Connects and performs the opening handshake; throws unless the server answers 101
   * with the right Sec-WebSocket-Accept.
   */
  static async connect(port, {path: target = "/socket/websocket?vsn=2.0.0", host = "127.0.0.1", ms = 5000, extraHeaders = []} = {}){
    const sock = await connectTcp(port, host, ms)
    sock.setNoDelay(true)
    const ws = new RawWs(sock)
    const key = randomBytes(16).toString("base64")
    ws.send(handshakeRequest({port, path: target, key, extraHeaders}))
    const res = await ws.reader.until(buf => parseHttpResponse(buf, {head: true}), ms, "the handshake response")
    if(!res){
      ws.destroy()
      throw new Error("connection closed during the handshake")
    }
    ws.reader.take(res.consumed)
    if(res.status !== 101){
      ws.destroy()
      throw new Error(`handshake failed: HTTP ${res.status}\n${res.headText}`)
    }
    const expected = createHash("sha1").update(key + WS_GUID).digest("base64")
    if(res.headers["sec-websocket-accept"] !== expected){
      ws.destroy()
      throw new Error(`bad Sec-WebSocket-Accept ${res.headers["sec-websocket-accept"]}, expected ${expected}`)
    }
    ws.handshake = res
    return ws
  }

  /** `reader`: an existing reader of sock, e.g. a RawHttp's after a manual handshake. */
  constructor(sock, reader = new ByteReader(sock)){
    this.sock = sock
    this.reader = reader
    this.writeError = null
    // writes after the server closed may fail: remember, do not crash
    sock.on("error", err => { this.writeError = err })
  }

  /** Writes raw bytes (string or Buffer). */
  send(bytes){
    if(this.sock.destroyed || this.sock.writableEnded){ return }
    this.sock.write(bytes)
  }

  sendFrame(opts){ this.send(encodeFrame(opts)) }
  sendText(text, opts = {}){ this.sendFrame({opcode: OP.text, payload: Buffer.from(text, "utf8"), ...opts}) }
  sendBinary(bytes, opts = {}){ this.sendFrame({opcode: OP.binary, payload: bytes, ...opts}) }
  sendPing(payload = Buffer.alloc(0)){ this.sendFrame({opcode: OP.ping, payload}) }
  sendClose(code, reason = ""){ this.sendFrame({opcode: OP.close, payload: code === undefined ? Buffer.alloc(0) : closePayload(code, reason)}) }

  /**
   * The next frame from the server, as {fin, rsv, opcode, masked, payload};
   * null when the connection ended without one.
   */
  async nextFrame(ms = 5000){
    const frame = await this.reader.until(decodeFrame, ms, "a frame from the server")
    if(!frame){ return null }
    this.reader.take(frame.size)
    return frame
  }

  /**
   * The next complete data message {opcode, data: Buffer, text?}, reassembling fragments
   * and answering pings. Throws when a close frame or the end of the connection comes first.
   */
  async nextMessage(ms = 5000){
    const deadline = Date.now() + ms
    let parts = null
    let opcode = null
    for(;;){
      const frame = await this.nextFrame(Math.max(1, deadline - Date.now()))
      if(!frame){ throw new Error("connection ended while waiting for a message") }
      if(frame.masked){ throw new Error("server sent a masked frame") }
      if(frame.opcode === OP.ping){ this.sendFrame({opcode: OP.pong, payload: frame.payload}); continue }
      if(frame.opcode === OP.pong){ continue }
      if(frame.opcode === OP.close){
        const code = frame.payload.length >= 2 ? frame.payload.readUInt16BE(0) : null
        throw new Error(`server closed (code ${code}) while waiting for a message`)
      }
      if(frame.opcode === OP.cont){
        if(!parts){ throw new Error("server sent a continuation without a start") }
        parts.push(frame.payload)
      } else {
        if(parts){ throw new Error("server started a new message inside a fragmented one") }
        parts = [frame.payload]
        opcode = frame.opcode
      }
      if(frame.fin){
        const data = Buffer.concat(parts)
        return opcode === OP.text ? {opcode, data, text: data.toString("utf8")} : {opcode, data}
      }
    }
  }

  /**
   * Reads frames until the server's close frame; answers it with a close of the same code.
   * Returns {code, reason, frames (data/control frames seen before), closeFrame, tcpClosed}.
   * code is null if the connection ended with no close frame.
   */
  async waitClose(ms = 5000){
    const deadline = Date.now() + ms
    const frames = []
    for(;;){
      const frame = await this.nextFrame(Math.max(1, deadline - Date.now()))
      if(!frame){ return {code: null, reason: null, frames, closeFrame: null, error: this.reader.error} }
      if(frame.opcode !== OP.close){ frames.push(frame); continue }
      const code = frame.payload.length >= 2 ? frame.payload.readUInt16BE(0) : null
      const reason = frame.payload.length > 2 ? frame.payload.subarray(2).toString("utf8") : ""
      // complete the closing handshake
      try { this.sendFrame({opcode: OP.close, payload: code === null ? Buffer.alloc(0) : closePayload(code)}) } catch(_e){ /* closed */ }
      return {code, reason, frames, closeFrame: frame}
    }
  }

  /** Resolves true when the server closes the TCP connection within ms. */
  async tcpClosed(ms = 3000){
    try {
      await this.reader.until(() => undefined, ms, "TCP close")
      return true
    } catch(_e){
      return false
    }
  }

  destroy(){ this.sock.destroy() }
}

// ---------------------------------------------------------------------------
// Phoenix messages over the raw client (v1 objects or v2 arrays)

/**
 * A Phoenix protocol speaker on top of RawWs: `send({join_ref, ref, topic, event, payload})`
 * and `next()` returning messages in the same shape (plus `raw`, the received text).
 */
export class RawPhx {
  static async connect(port, vsn = "2.0.0", opts = {}){
    const query = vsn === null ? "" : `?vsn=${vsn}`
    const ws = await RawWs.connect(port, {path: `/socket/websocket${query}`, ...opts})
    return new RawPhx(ws, vsn === null ? "1.0.0" : vsn)
  }

  constructor(ws, vsn){
    this.ws = ws
    this.vsn = vsn
    this.refCounter = 0
  }

  makeRef(){ return String(++this.refCounter) }

  encode({join_ref = null, ref = null, topic, event, payload}){
    if(this.vsn === "2.0.0"){ return JSON.stringify([join_ref, ref, topic, event, payload]) }
    return JSON.stringify({topic, event, payload, ref, join_ref})
  }

  send(msg){ this.ws.sendText(this.encode(msg)) }

  /** The next Phoenix message (text frames only; binary ones are returned as {binary}). */
  async next(ms = 5000){
    const m = await this.ws.nextMessage(ms)
    if(m.opcode !== OP.text){ return {binary: m.data} }
    const decoded = JSON.parse(m.text)
    if(this.vsn === "2.0.0"){
      if(!Array.isArray(decoded) || decoded.length !== 5){ throw new Error(`not a v2 message: ${m.text}`) }
      const [join_ref, ref, topic, event, payload] = decoded
      return {join_ref, ref, topic, event, payload, raw: m.text}
    }
    if(decoded === null || typeof decoded !== "object" || Array.isArray(decoded)){ throw new Error(`not a v1 message: ${m.text}`) }
    return {join_ref: decoded.join_ref ?? null, ref: decoded.ref ?? null, topic: decoded.topic, event: decoded.event, payload: decoded.payload, raw: m.text}
  }

  /** Reads messages until one matches pred; returns {match, skipped}. */
  async nextMatching(pred, ms = 5000, label = "a matching message"){
    const deadline = Date.now() + ms
    const skipped = []
    for(;;){
      const left = deadline - Date.now()
      if(left <= 0){ throw new Error(`timed out waiting for ${label}; got ${JSON.stringify(skipped)}`) }
      let msg
      try {
        msg = await this.next(left)
      } catch(err){
        throw new Error(`${err.message} (waiting for ${label}; got ${JSON.stringify(skipped)})`)
      }
      if(pred(msg)){ return {match: msg, skipped} }
      skipped.push(msg)
    }
  }

  /** Sends a request and waits for its phx_reply (by ref); returns the reply message. */
  async request({join_ref = null, topic, event, payload}, ms = 5000){
    const ref = this.makeRef()
    this.send({join_ref, ref, topic, event, payload})
    const {match} = await this.nextMatching(m => m.event === "phx_reply" && m.ref === ref, ms, `the reply to ${event} ${topic} (ref ${ref})`)
    return match
  }

  async join(topic, payload = {}, ms = 5000){
    const join_ref = this.makeRef()
    this.refCounter-- // the join's ref is its join_ref
    const ref = this.makeRef()
    this.send({join_ref, ref, topic, event: "phx_join", payload})
    const {match} = await this.nextMatching(m => m.event === "phx_reply" && m.ref === ref, ms, `the reply to phx_join ${topic}`)
    return {join_ref, reply: match}
  }

  destroy(){ this.ws.destroy() }
}

/**
 * Checks that the server still serves well-behaved clients: two raw clients join
 * rooms:lobby, one sends new:msg, the other receives it.
 */
export async function assertServerServes(port, {vsn = "2.0.0", ms = 5000} = {}){
  const a = await RawPhx.connect(port, vsn)
  const b = await RawPhx.connect(port, vsn)
  try {
    const joinRefs = []
    for(const c of [a, b]){
      const {join_ref, reply} = await c.join("rooms:lobby", {user: "probe"}, ms)
      if(reply.payload?.status !== "ok"){ throw new Error(`health probe join failed: ${JSON.stringify(reply)}`) }
      joinRefs.push(join_ref)
    }
    const body = `probe-${randomBytes(4).toString("hex")}`
    a.send({join_ref: joinRefs[0], ref: a.makeRef(), topic: "rooms:lobby", event: "new:msg", payload: {user: "probe", body}})
    const {match} = await b.nextMatching(m => m.event === "new:msg" && m.payload?.body === body, ms, "the probe broadcast")
    if(match.topic !== "rooms:lobby" || match.payload.user !== "probe"){
      throw new Error(`bad probe broadcast ${JSON.stringify(match)}`)
    }
  } finally {
    a.destroy()
    b.destroy()
  }
}

// ---------------------------------------------------------------------------
// the official phoenix client in node

/** v1 serializer for phoenix.js: JSON objects. */
export const v1Serializer = {
  encode(msg, callback){
    const {topic, event, payload, ref, join_ref} = msg
    return callback(JSON.stringify({topic, event, payload, ref: ref ?? null, join_ref: join_ref ?? null}))
  },
  decode(raw, callback){
    const obj = JSON.parse(typeof raw === "string" ? raw : Buffer.from(raw).toString("utf8"))
    return callback({
      join_ref: obj.join_ref ?? null,
      ref: obj.ref ?? null,
      topic: obj.topic,
      event: obj.event,
      payload: obj.payload,
    })
  },
}

export const SERIALIZERS = ["2.0.0", "1.0.0"]

/**
 * A phoenix.js Socket (not yet connected) for `vsn`, with the ws transport
 * unless `opts.transport` says otherwise (e.g. phoenix.js's `LongPoll`).
 */
export function phoenixSocket(wsUrl, vsn = "2.0.0", opts = {}){
  const base = {transport: WebSocket, timeout: 5000, rejoinAfterMs: () => 60000, reconnectAfterMs: () => 60000, ...opts}
  if(vsn === "1.0.0"){
    const socket = new Socket(`${wsUrl}/socket`, {...base, vsn: "1.0.0", encode: v1Serializer.encode, decode: v1Serializer.decode})
    // phoenix.js 1.8 ignores custom encode/decode when constructed with the
    // LongPoll transport (socket.js); the v1 serializer is text, which
    // long-poll carries, so it is set here for both transports.
    socket.encode = v1Serializer.encode
    socket.decode = v1Serializer.decode
    return socket
  }
  return new Socket(`${wsUrl}/socket`, base)
}

/**
 * Disconnects a phoenix socket and stops its channels' rejoin timers, so that no
 * phoenix.js timer keeps the test process alive.
 */
export function closePhoenix(socket, ms = 3000){
  const stopTimers = () => {
    for(const channel of socket.channels){
      channel.rejoinTimer.reset()
      channel.joinPush.cancelTimeout()
      channel.pushBuffer.forEach(push => push.cancelTimeout())
    }
    socket.reconnectTimer.reset()
    socket.clearHeartbeats()
  }
  stopTimers()
  return withTimeout(new Promise(resolve => socket.disconnect(() => { stopTimers(); resolve() })), ms, "phoenix socket disconnect")
    .catch(() => stopTimers())
}

/** Connects a phoenix socket and waits for it to open. */
export async function connectPhoenix(wsUrl, vsn, opts = {}, ms = 5000){
  const socket = phoenixSocket(wsUrl, vsn, opts)
  const opened = new Promise((resolve, reject) => {
    socket.onOpen(resolve)
    socket.onError(err => reject(new Error(`phoenix socket error: ${err?.message || err?.type || err}`)))
  })
  socket.connect()
  try {
    await withTimeout(opened, ms, `phoenix socket (vsn ${vsn}) to open`)
  } catch(err){
    await closePhoenix(socket)
    throw err
  }
  return socket
}

/** channel.join() as a promise of {status, response} ("ok", "error" or "timeout"). */
export function joinResult(channel, ms = 5000){
  return withTimeout(new Promise(resolve => {
    channel.join()
      .receive("ok", response => resolve({status: "ok", response}))
      .receive("error", response => resolve({status: "error", response}))
      .receive("timeout", () => resolve({status: "timeout"}))
  }), ms, `join of ${channel.topic}`)
}

/** Resolves with the payload of the next `event` on channel. */
export function nextEvent(channel, event, ms = 5000, pred = () => true){
  return withTimeout(new Promise(resolve => {
    const ref = channel.on(event, payload => {
      if(!pred(payload)){ return }
      channel.off(event, ref)
      resolve(payload)
    })
  }), ms, `${event} on ${channel.topic}`)
}

/** Resolves with the next message (any topic) seen by the socket that matches pred. */
export function nextSocketMessage(socket, pred, ms = 5000, label = "a socket message"){
  let ref
  return withTimeout(new Promise(resolve => {
    ref = socket.onMessage(msg => { if(pred(msg)){ resolve(msg) } })
  }), ms, label).finally(() => socket.off([ref]))
}
