// A Pusher app's webhook backend, as its own process (so a test can kill
// it and start it again on the same port): POST /pusher/webhooks, checked
// with the official `pusher` SDK's WebHook (content type, X-Pusher-Key,
// X-Pusher-Signature), each valid body's events appended to a file as JSON
// lines ({time_ms, name, channel, ...}); an invalid one is answered 401 and
// appended as {"invalid": true}. GET /events returns the file's events.
//
// node webhook_backend.mjs PORT FILE ANSWER KEY SECRET
// ANSWER: the status of valid POSTs (200, or 500 to refuse them all).
import {appendFileSync, existsSync, readFileSync} from "node:fs"
import http from "node:http"
import PusherServer from "pusher"

const [port, file, answer, key, secret] = process.argv.slice(2)
const pusher = new PusherServer({appId: "1", key, secret})

const server = http.createServer((req, res) => {
  const chunks = []
  req.on("data", (c) => chunks.push(c))
  req.on("end", () => {
    if(req.method === "GET" && req.url === "/events"){
      const lines = existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean) : []
      res.writeHead(200, {"content-type": "application/json"})
      res.end(JSON.stringify(lines.map((l) => JSON.parse(l))))
      return
    }
    if(req.method !== "POST" || req.url !== "/pusher/webhooks"){
      res.writeHead(404)
      res.end()
      return
    }
    const rawBody = Buffer.concat(chunks).toString("utf8")
    const hook = pusher.webhook({headers: req.headers, rawBody})
    if(!hook.isValid()){
      appendFileSync(file, JSON.stringify({invalid: true, headers: req.headers, body: rawBody}) + "\n")
      res.writeHead(401)
      res.end()
      return
    }
    const status = Number(answer)
    if(status === 200){
      const time_ms = hook.getTime().getTime()
      const lines = hook.getEvents().map((e) => JSON.stringify({time_ms, ...e}) + "\n")
      appendFileSync(file, lines.join(""))
    }
    res.writeHead(status, {"content-type": "application/json"})
    res.end("{}")
  })
})
server.listen(Number(port), "127.0.0.1", () => {
  console.log(`webhooks listening on ${server.address().port}`)
})
