// A chat app's backend behind throng (docs/hooks.md, "The example
// backend"): express, SQLite.
//
//   node examples/backend/server.js
//   throng serve --config examples/backend/throng.toml
//
// then open the backend's page (printed at start) to log in. Both read
// throng.toml: throng's port is its `port`, the backend's the port of its
// `[hooks] url`, the shared secret its `[hooks] secret` (settings.js).
// Settings (environment):
//   THRONG_PORT        throng's port (throng reads it too); default throng.toml's
//   THRONG_HOOK_URL    where throng sends hooks (throng reads it too); the
//                      backend listens on its port; default throng.toml's
//   THRONG_HOOK_SECRET the secret throng signs with (throng reads it too);
//                      default throng.toml's development secret
//   PORT               the backend's port instead (0: any free port; printed)
//   HOST               the address to listen on instead of the hook URL's host
//   CHAT_DB            the SQLite file; default chat.db in
//                      $XDG_DATA_HOME/throng-example-backend (~/.local/share/...)
//   THRONG_URL         the chat page to go to once logged in
//                      (default: throng's port on the host the browser used)
//   HOOK_MAX_AGE_MS    60000: hook requests signed longer ago (or ahead) are refused
//
// Routes: GET / and POST /login, /logout (pages.js); POST /throng/* from
// throng (hooks.js); GET /rooms/:topic/online, who is online in a room,
// kept from throng's lifecycle events.
import express from "express"
import {openDb} from "./db.js"
import {hooksRouter} from "./hooks.js"
import {pagesRouter} from "./pages.js"
import {settings} from "./settings.js"

const log = line => console.error(`[backend] ${line}`)
let config
try {
  config = settings()
} catch(e){
  log(e.message)
  process.exit(1)
}
const {port, host, secret, chatUrl} = config
const maxAgeMs = Number(process.env.HOOK_MAX_AGE_MS || 60000)
if(config.secretIsFiles){
  log("THRONG_HOOK_SECRET is not set: using the development secret of throng.toml; set the same long random secret for both anywhere but your own machine")
}

const store = openDb(config.db)
log(`messages and sessions in ${config.db} (set CHAT_DB for another file)`)

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
