// The server API at a drain's end: a request in progress gets its answer
// before the process exits. A POST /api/broadcast the node had published
// but not answered used to die with the process; the backend retried it
// elsewhere, as it should on a connection error, and the message went out
// twice (the duplicates tests/cluster/history_drain.test.mjs saw across a
// rolling restart). Deterministic: the request's body is held back until
// the node has finished its drain and waits for the API.
import {test} from "node:test"
import assert from "node:assert/strict"
import {startServer, readMetric, RawHttp, withTimeout} from "./helpers.mjs"

test("a drain's end answers the server API request in progress before exiting", {timeout: 30000}, async () => {
  const server = await startServer(["--api-bind", "127.0.0.1:0"])
  const exited = new Promise(resolve => server.proc.once("exit", (code, signal) => resolve({code, signal})))
  try {
    const body = JSON.stringify({topic: "rooms:drain", event: "n", payload: {n: 1}})
    const http = await RawHttp.connect(server.apiPort)
    http.send(`POST /api/broadcast HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${body.length}\r\n\r\n${body.slice(0, 10)}`)
    // The handler runs (it counts the request, then waits for the body).
    const deadline = Date.now() + 5000
    while(await readMetric(server.apiUrl, "throng_api_requests_total") < 1){
      assert.ok(Date.now() < deadline, "the server API never started the request")
      await new Promise(resolve => setTimeout(resolve, 20))
    }
    // No sockets: the drain ends at once, and the node waits for the API.
    server.proc.kill("SIGTERM")
    const waiting = /server API: closing its \d+ open connections once their requests in progress are answered/
    const outcome = await withTimeout((async () => {
      for(;;){
        if(waiting.test(server.stderr())){ return "waiting" }
        if(!server.alive()){ return "exited" }
        await new Promise(resolve => setTimeout(resolve, 10))
      }
    })(), 10000, "the drain's end")
    assert.equal(outcome, "waiting", `the process exited with a request in progress: ${server.stderr()}`)
    http.send(body.slice(10))
    const res = await http.response()
    assert.equal(res.status, 200, res.body.toString())
    assert.deepEqual(JSON.parse(res.body.toString()), {ok: true})
    assert.match(res.headers["connection"] ?? "", /close/i)
    assert.ok(await http.closedByServer(5000), "the connection stays open after the answer")
    const {code} = await withTimeout(exited, 10000, "the exit after the drain")
    assert.equal(code, 0, server.stderr())
  } finally {
    await server.stop()
  }
})
