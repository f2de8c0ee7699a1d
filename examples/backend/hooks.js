// What throng asks the backend (README "App backend hooks"): POST
// /throng/connect, /throng/join, /throng/push and /throng/events, each
// signed. Every request is verified first; a forged or replayed one gets 401.
import express from "express"
import {parse as parseCookie} from "cookie"
import {verify} from "./signature.js"

/** Longest message body the chat keeps. */
export const MAX_BODY = 2000

/**
 * The hooks router. `store` is db.js's; `log(line)` reports refused
 * requests.
 */
export function hooksRouter({store, secret, maxAgeMs, log}){
  const router = express.Router()
  // The raw bytes: the signature is over the body exactly as sent.
  router.use(express.raw({type: () => true, limit: "1mb"}))
  router.use((req, res, next) => {
    const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0)
    const checked = verify({secret, maxAgeMs, body, header: req.get("x-throng-signature")})
    if(checked.refused){
      log(`refused ${req.method} ${req.originalUrl} from ${req.ip}: ${checked.refused}`)
      return res.status(401).json({error: {reason: checked.refused}})
    }
    req.hook = checked.json
    next()
  })

  // A new socket: the session cookie the login set says who it is.
  router.post("/connect", (req, res) => {
    const cookies = parseCookie(req.hook.headers?.cookie ?? "")
    const user = store.sessionUser(cookies.session)
    if(!user){ return res.json({error: {reason: "not logged in"}}) }
    res.json({user, assigns: {}})
  })

  // A join: refused for a banned user; otherwise the room's last messages.
  router.post("/join", (req, res) => {
    const {topic, user} = req.hook
    if(!user){ return res.json({error: {reason: "log in first"}}) }
    const banned = store.banReason(user, topic)
    if(banned){ return res.json({error: {reason: banned}}) }
    res.json({reply: {user, messages: store.lastMessages(topic)}})
  })

  // A push: `new:msg` is saved, then broadcast to the room on every node.
  router.post("/push", (req, res) => {
    const {topic, event, payload, user} = req.hook
    if(event !== "new:msg"){ return res.json({error: {reason: `unknown event ${event}`}}) }
    const body = typeof payload?.body === "string" ? payload.body.trim() : ""
    if(!body){ return res.json({error: {reason: "empty message"}}) }
    if(body.length > MAX_BODY){ return res.json({error: {reason: `message too long (${MAX_BODY} characters at most)`}}) }
    // The sender is who the connect hook said, never a name in the payload.
    const message = store.saveMessage(topic, user, body)
    res.json({reply: {id: message.id}, broadcast: {event: "new:msg", payload: message}})
  })

  // Lifecycle events, in batches: who is online per room.
  router.post("/events", (req, res) => {
    if(!Array.isArray(req.hook)){ return res.status(400).json({error: {reason: "expected a JSON array of events"}}) }
    const applied = store.applyEvents(req.hook.filter(e => e && typeof e === "object" && e.id != null))
    res.json({ok: true, applied})
  })

  return router
}
