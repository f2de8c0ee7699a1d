// Plain HTTP routes: the chat page, its assets, metrics, HEAD, 404 and keep-alive.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {readFileSync} from "node:fs"
import path from "node:path"
import {startServer, httpRequest, RawHttp, REPO_ROOT, RawPhx} from "./helpers.mjs"

const T = {timeout: 20000}

let server
before(async () => { server = await startServer() }, {timeout: 20000})
after(async () => { await server?.stop() }, {timeout: 20000})

const asset = name => readFileSync(path.join(REPO_ROOT, "crates/throng-server/assets", name))

test("GET / returns the chat page as text/html", T, async () => {
  const res = await httpRequest(server.port, "GET", "/")
  assert.equal(res.status, 200)
  assert.match(res.headers["content-type"] || "", /^text\/html/)
  const html = res.body.toString("utf8")
  assert.match(html, /^<!DOCTYPE html>/i)
  assert.match(html, /<title>[^<{}]+<\/title>/, "the title placeholder should be filled in")
  assert.ok(!html.includes("{{"), "no unrendered placeholders")
  for(const id of ["status", "messages", "user", "message", "send"]){
    assert.match(html, new RegExp(`id="${id}"`), `page should contain #${id}`)
  }
  assert.match(html, /href="\/assets\/app\.css"/)
  assert.match(html, /src="\/assets\/app\.js"/)
  if("content-length" in res.headers){ assert.equal(Number(res.headers["content-length"]), res.body.length) }
})

test("GET /assets/app.js and /assets/app.css serve the committed bundle", T, async () => {
  const js = await httpRequest(server.port, "GET", "/assets/app.js")
  assert.equal(js.status, 200)
  assert.match(js.headers["content-type"] || "", /javascript/)
  assert.deepEqual(js.body, asset("app.js"))
  const css = await httpRequest(server.port, "GET", "/assets/app.css")
  assert.equal(css.status, 200)
  assert.match(css.headers["content-type"] || "", /^text\/css/)
  assert.deepEqual(css.body, asset("app.css"))
})

test("HEAD / returns the headers of GET and no body", T, async () => {
  const get = await httpRequest(server.port, "GET", "/")
  const conn = await RawHttp.connect(server.port)
  try {
    // HEAD, then a GET on the same connection: any stray body bytes after the HEAD
    // response would corrupt the second response
    conn.send(`HEAD / HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n\r\n`)
    const head = await conn.response({head: true})
    assert.equal(head.status, 200)
    assert.equal(head.headers["content-type"], get.headers["content-type"])
    if("content-length" in head.headers){ assert.equal(Number(head.headers["content-length"]), get.body.length) }
    conn.send(`GET /nope HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nConnection: close\r\n\r\n`)
    const next = await conn.response()
    assert.equal(next.status, 404, `the response after HEAD should be the 404, got ${next.headText}`)
  } finally {
    conn.close()
  }
})

test("unknown paths return 404 (GET and HEAD)", T, async () => {
  const res = await httpRequest(server.port, "GET", "/nope")
  assert.equal(res.status, 404)
  const head = await httpRequest(server.port, "HEAD", "/assets/nope.js")
  assert.equal(head.status, 404)
  assert.equal(head.body.length, 0)
})

test("keep-alive: two requests on one connection", T, async () => {
  const conn = await RawHttp.connect(server.port)
  try {
    conn.send(`GET /assets/app.css HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n\r\n`)
    const first = await conn.response()
    assert.equal(first.status, 200)
    assert.deepEqual(first.body, asset("app.css"))
    assert.notEqual((first.headers.connection || "").toLowerCase(), "close", "server should keep the connection open")
    conn.send(`GET / HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n\r\n`)
    const second = await conn.response()
    assert.equal(second.status, 200)
    assert.match(second.body.toString("utf8"), /id="messages"/)
  } finally {
    conn.close()
  }
})

test("pipelined requests are answered in order", T, async () => {
  const conn = await RawHttp.connect(server.port)
  try {
    const req = p => `GET ${p} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n\r\n`
    conn.send(req("/assets/app.css") + req("/nope") + req("/"))
    assert.equal((await conn.response()).status, 200)
    assert.equal((await conn.response()).status, 404)
    const third = await conn.response()
    assert.equal(third.status, 200)
    assert.match(third.headers["content-type"] || "", /^text\/html/)
  } finally {
    conn.close()
  }
})

test("Connection: close is honoured", T, async () => {
  const conn = await RawHttp.connect(server.port)
  try {
    conn.send(`GET /nope HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nConnection: close\r\n\r\n`)
    assert.equal((await conn.response()).status, 404)
    assert.ok(await conn.closedByServer(3000), "server should close the connection")
  } finally {
    conn.close()
  }
})

test("GET /metrics is Prometheus text with throng_connections, on the API listener only", T, async () => {
  // hold one WebSocket open so the gauge has something to count
  const c = await RawPhx.connect(server.port)
  try {
    await c.join("rooms:lobby", {user: "metrics"})
    const hidden = await httpRequest(server.port, "GET", "/metrics")
    assert.equal(hidden.status, 404, "no /metrics on the public port without --public-metrics")
    const res = await httpRequest(server.apiPort, "GET", "/metrics")
    assert.equal(res.status, 200)
    assert.match(res.headers["content-type"] || "", /^text\/plain/)
    const text = res.body.toString("utf8")
    const sample = /^throng_connections\w*(?:\{[^}]*\})? (\d+(?:\.\d+)?(?:e\+?\d+)?)$/m
    assert.match(text, sample, `no throng_connections sample in:\n${text.slice(0, 1500)}`)
    const value = Number(text.match(sample)[1])
    assert.ok(value >= 1, `throng_connections should count the open socket, got ${value}`)
  } finally {
    c.destroy()
  }
})
