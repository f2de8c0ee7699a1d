// The official phoenix.js client over the long-poll transport (`transport:
// LongPoll`), once per serializer: join, push, replies, broadcasts to and
// from WebSocket clients, leave and rejoin. And what the app sees of a
// client's connect options (`params`, `authToken`) over both transports,
// through the test-only `echo:*` channel of `--echo`.
import {describe, test, before, after} from "node:test"
import assert from "node:assert/strict"
import {LongPoll} from "phoenix"
import {
  startServer, connectPhoenix, closePhoenix, joinResult, nextEvent, withTimeout, SERIALIZERS,
} from "./helpers.mjs"

const T = {timeout: 20000}

let server
// a short window: the clients' polls come back empty (204) and poll again
// during the tests, as they do in production every 10 s
before(async () => { server = await startServer(["--echo", "--longpoll-window", "1"]) }, {timeout: 20000})
after(async () => { await server?.stop() }, {timeout: 20000})

const TRANSPORTS = {websocket: undefined, longpoll: LongPoll}

/** A connected phoenix.js socket over `transport`, disconnected when the test ends. */
async function socketFor(t, vsn, transport, opts = {}){
  const socket = await connectPhoenix(server.wsUrl, vsn, {...opts, ...(transport ? {transport} : {})})
  t.after(() => closePhoenix(socket))
  return socket
}

async function lobby(t, vsn, transport, user){
  const socket = await socketFor(t, vsn, transport)
  const channel = socket.channel("rooms:lobby", {user})
  const res = await joinResult(channel)
  assert.deepEqual(res, {status: "ok", response: {}})
  return {socket, channel}
}

const unique = label => `${label}-${process.hrtime.bigint()}`

for(const vsn of SERIALIZERS){
  describe(`phoenix.js over long-poll, serializer ${vsn}`, () => {
    test("the socket is a long-poll one, joins, pushes and gets the reply and its broadcast", T, async t => {
      const {socket, channel} = await lobby(t, vsn, LongPoll, "lp")
      assert.ok(socket.conn instanceof LongPoll, "not a long-poll transport")
      const body = unique("lp-self")
      const got = nextEvent(channel, "new:msg", 5000, p => p.body === body)
      const reply = await withTimeout(new Promise(resolve => {
        channel.push("new:msg", {user: "lp", body}).receive("ok", resolve)
      }), 5000, "the push's reply")
      assert.deepEqual(reply, {msg: body})
      assert.deepEqual(await got, {user: "lp", body})
    })

    test("broadcasts reach WebSocket clients from long-poll ones and the other way", T, async t => {
      const lp = await lobby(t, vsn, LongPoll, "lp")
      const ws = await lobby(t, vsn, undefined, "ws")
      const fromLp = unique("from-lp")
      const fromWs = unique("from-ws")
      const wsGets = nextEvent(ws.channel, "new:msg", 5000, p => p.body === fromLp)
      const lpGets = nextEvent(lp.channel, "new:msg", 5000, p => p.body === fromWs)
      lp.channel.push("new:msg", {user: "lp", body: fromLp})
      ws.channel.push("new:msg", {user: "ws", body: fromWs})
      assert.deepEqual(await wsGets, {user: "lp", body: fromLp})
      assert.deepEqual(await lpGets, {user: "ws", body: fromWs})
    })

    test("messages keep coming across empty polls (204 after the window)", T, async t => {
      const lp = await lobby(t, vsn, LongPoll, "patient")
      const ws = await lobby(t, vsn, undefined, "ws")
      // the client gets an empty poll (204 after the window) and polls again,
      // and the session is still the same one (no reconnect)
      let closes = 0
      lp.socket.onClose(() => { closes++ })
      const conn = lp.socket.conn
      const token = conn.token
      const empty = new Promise(resolve => {
        const ajax = conn.ajax.bind(conn)
        conn.ajax = (method, headers, body, ontimeout, callback) => ajax(method, headers, body, ontimeout, resp => {
          if(resp && resp.status === 204){ resolve() }
          callback(resp)
        })
      })
      await withTimeout(empty, 5000, "an empty poll")
      const body = unique("later")
      const got = nextEvent(lp.channel, "new:msg", 5000, p => p.body === body)
      ws.channel.push("new:msg", {user: "ws", body})
      assert.deepEqual(await got, {user: "ws", body})
      assert.equal(closes, 0)
      assert.equal(lp.socket.conn.token, token, "the session changed")
    })

    test("leave then rejoin the same topic at once, 20 times, over long-poll", {timeout: 60000}, async t => {
      const socket = await socketFor(t, vsn, LongPoll)
      for(let i = 0; i < 20; i++){
        const channel = socket.channel("rooms:lobby", {user: `again${i}`})
        const res = await joinResult(channel)
        assert.equal(res.status, "ok", `join ${i}: ${JSON.stringify(res)}`)
        let closedEarly = false
        channel.onClose(() => { closedEarly = true })
        if(i === 19){
          const body = unique("rejoined")
          const got = nextEvent(channel, "new:msg", 5000, p => p.body === body)
          channel.push("new:msg", {user: "again", body}, 1000)
          assert.deepEqual(await got, {user: "again", body})
          assert.equal(closedEarly, false, "the last rejoin was closed by the server")
          break
        }
        await withTimeout(new Promise(resolve => channel.leave().receive("ok", resolve)), 5000, `leave ${i}`)
      }
    })
  })

  for(const [name, transport] of Object.entries(TRANSPORTS)){
    describe(`connect options reach the app over ${name}, serializer ${vsn}`, () => {
      test("params and authToken", T, async t => {
        const socket = await socketFor(t, vsn, transport, {
          params: {token: "p-token", user_id: "42"},
          authToken: "secret:token+/=",
        })
        const res = await joinResult(socket.channel("echo:connect", {hi: 1}))
        assert.deepEqual(res, {status: "ok", response: {
          params: {token: "p-token", user_id: "42"}, auth_token: "secret:token+/=", user_id: null,
          topic: "echo:connect", join: {hi: 1},
        }})
      })

      test("nothing sent: no params, no token", T, async t => {
        const socket = await socketFor(t, vsn, transport)
        const res = await joinResult(socket.channel("echo:bare", {}))
        assert.deepEqual(res.response.params, {})
        assert.equal(res.response.auth_token, null)
      })
    })
  }
}
