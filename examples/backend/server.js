// A chat app's backend behind throng (README "The chat app with a
// backend"): express on 127.0.0.1:8000, SQLite in chat.db.
//
//   node examples/backend/server.js
//   throng serve --config examples/backend/throng.toml
//
// then open http://127.0.0.1:8000/ to log in. Settings (environment):
//   PORT               8000 (0: any free port; the chosen one is printed)
//   HOST               127.0.0.1
//   CHAT_DB            chat.db beside this file
//   THRONG_HOOK_SECRET the secret throng signs with (throng reads the same
//                      variable); without it, throng.toml's development secret
//   THRONG_URL         the chat page to go to once logged in
//                      (default: port 4000 of the host the browser used)
//   HOOK_MAX_AGE_MS    60000: hook requests signed longer ago (or ahead) are refused
//
// Routes: GET / and POST /login, /logout (pages.js); POST /throng/* from
// throng (hooks.js); GET /rooms/:topic/online, who is online in a room,
// kept from throng's lifecycle events.
import express from "express"
import path from "node:path"
import {fileURLToPath} from "node:url"
import {openDb} from "./db.js"
import {hooksRouter} from "./hooks.js"
import {pagesRouter} from "./pages.js"

const here = path.dirname(fileURLToPath(import.meta.url))
// throng.toml's secret, for trying the example on one machine only.
const DEV_SECRET = "dev-only-secret-change-me-before-you-deploy"

const port = Number(process.env.PORT ?? 8000)
const host = process.env.HOST || "127.0.0.1"
const secret = process.env.THRONG_HOOK_SECRET || DEV_SECRET
const maxAgeMs = Number(process.env.HOOK_MAX_AGE_MS || 60000)
const log = line => console.error(`[backend] ${line}`)
if(secret === DEV_SECRET){
  log("THRONG_HOOK_SECRET is not set: using the development secret of throng.toml; set the same secret for both in production")
}

const store = openDb(process.env.CHAT_DB || path.join(here, "chat.db"))
const chatUrl = req => process.env.THRONG_URL || `${req.protocol}://${req.hostname}:4000/`

const app = express()
app.disable("x-powered-by")
app.use("/throng", hooksRouter({store, secret, maxAgeMs, log}))
app.get("/rooms/:topic/online", (req, res) => {
  res.json({topic: req.params.topic, users: store.online(req.params.topic)})
})
app.use(pagesRouter({store, chatUrl}))

const server = app.listen(port, host, err => {
  if(err){
    log(`cannot listen on ${host}:${port}: ${err.message} (set PORT to another port)`)
    process.exit(1)
  }
  console.log(`backend listening on http://${host}:${server.address().port}`)
  console.log(`open http://${host}:${server.address().port}/ to log in`)
})
// throng keeps its connections to the backend open (a keep-alive pool).
server.keepAliveTimeout = 60000

const stop = () => server.close(() => { store.close(); process.exit(0) })
process.on("SIGINT", stop)
process.on("SIGTERM", stop)
