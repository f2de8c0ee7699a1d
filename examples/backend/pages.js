// The pages a person sees on the backend: log in (which sets the session
// cookie the connect hook reads, then sends the browser to throng's chat
// page) and log out. Cookies belong to a host, not a port, so the cookie
// set here on the backend's port reaches throng's port on the same host.
//
// A demo login: any name not taken by a rule below is accepted without a
// password. A real app checks a password (or its identity provider) in
// POST /login; everything after it stays as it is.
import express from "express"
import {parse as parseCookie} from "cookie"
import {SESSION_MS} from "./db.js"

// The characters of a name, as one class both for the server's check and
// the form's `pattern`, which browsers compile with the `v` flag: there a
// literal hyphen in a class must be escaped (`[a-z_-]` is a syntax error).
const NAME_CHARS = String.raw`[A-Za-z0-9_\-]`
const NAME = new RegExp(`^${NAME_CHARS}{1,32}$`, "v")

const escape = s => String(s).replace(/[&<>"']/g, c => `&#${c.charCodeAt(0)};`)

function page(title, body){
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escape(title)}</title>
<style>body{font:16px system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem}
input,button{font:inherit;padding:.4rem .6rem}.error{color:#b00020}</style></head>
<body><h1>${escape(title)}</h1>${body}</body></html>`
}

/**
 * The login pages. `chatUrl(req)` is where the browser goes once logged in
 * (throng's chat page, on the host the browser used).
 */
export function pagesRouter({store, chatUrl}){
  const router = express.Router()
  router.use(express.urlencoded({extended: false, limit: "4kb"}))

  router.get("/", (req, res) => {
    const user = store.sessionUser(parseCookie(req.get("cookie") ?? "").session)
    const chat = escape(chatUrl(req))
    if(user){
      return res.type("html").send(page("throng chat", `<p>You are <strong id="me">${escape(user)}</strong>.
<a id="chat" href="${chat}">Open the chat</a></p>
<form method="post" action="/logout"><button id="logout">Log out</button></form>`))
    }
    const error = req.query.error ? `<p class="error">${escape(req.query.error)}</p>` : ""
    res.type("html").send(page("throng chat: log in", `${error}
<form method="post" action="/login">
<label>Your name <input id="name" name="name" required maxlength="32" pattern="${NAME_CHARS}+" autofocus></label>
<button id="login">Log in</button></form>
<p>Then the chat opens at <a href="${chat}">${chat}</a>. (<code>mallory</code> is banned, to see a refused join.)</p>`))
  })

  router.post("/login", (req, res) => {
    const name = String(req.body?.name ?? "").trim()
    if(!NAME.test(name)){
      return res.redirect(303, "/?error=" + encodeURIComponent("a name is 1 to 32 letters, digits, _ or -"))
    }
    const token = store.newSession(name)
    res.cookie("session", token, {httpOnly: true, sameSite: "lax", path: "/", maxAge: SESSION_MS})
    res.redirect(303, chatUrl(req))
  })

  router.post("/logout", (req, res) => {
    store.dropSession(parseCookie(req.get("cookie") ?? "").session)
    res.clearCookie("session", {path: "/"})
    res.redirect(303, "/")
  })

  return router
}
