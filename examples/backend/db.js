// The chat's data, in one SQLite file (better-sqlite3: synchronous, so a
// request's reads and writes need no locking): users' sessions, bans,
// messages, who is online per room (kept from throng's lifecycle events)
// and the ids of the events already applied (events are delivered at least
// once, so a retried batch must not count a join twice).
import Database from "better-sqlite3"
import {randomBytes} from "node:crypto"

const SCHEMA = `
CREATE TABLE IF NOT EXISTS sessions (
  token TEXT PRIMARY KEY,
  user TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS bans (
  user TEXT NOT NULL,
  room TEXT NOT NULL,            -- a topic, or '*' for every room
  reason TEXT NOT NULL,
  PRIMARY KEY (user, room)
);
CREATE TABLE IF NOT EXISTS messages (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  room TEXT NOT NULL,
  user TEXT NOT NULL,
  body TEXT NOT NULL,
  at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_room ON messages (room, id);
CREATE TABLE IF NOT EXISTS online (
  room TEXT NOT NULL,
  user TEXT NOT NULL,
  tabs INTEGER NOT NULL,         -- presence_join minus presence_leave of this key
  PRIMARY KEY (room, user)
);
CREATE TABLE IF NOT EXISTS events_seen (
  id TEXT PRIMARY KEY,
  seen_at INTEGER NOT NULL
);
`

/** How long a session cookie stays good. */
export const SESSION_MS = 7 * 24 * 3600 * 1000
/** How many messages a join reply carries. */
export const HISTORY = 50
/** How long an applied event's id is kept to drop its retries; older events are ignored. */
export const EVENT_ID_MS = 24 * 3600 * 1000

export function openDb(file){
  const db = new Database(file)
  db.pragma("journal_mode = WAL")
  db.exec(SCHEMA)
  // The demo's banned user, to see a refused join.
  db.prepare("INSERT OR IGNORE INTO bans (user, room, reason) VALUES ('mallory', '*', 'you are banned from this room')").run()

  const q = {
    newSession: db.prepare("INSERT INTO sessions (token, user, created_at) VALUES (?, ?, ?)"),
    session: db.prepare("SELECT user FROM sessions WHERE token = ? AND created_at > ?"),
    dropSession: db.prepare("DELETE FROM sessions WHERE token = ?"),
    ban: db.prepare("SELECT reason FROM bans WHERE user = ? AND (room = ? OR room = '*')"),
    save: db.prepare("INSERT INTO messages (room, user, body, at) VALUES (?, ?, ?, ?)"),
    last: db.prepare(`SELECT id, user, body, at FROM
      (SELECT id, user, body, at FROM messages WHERE room = ? ORDER BY id DESC LIMIT ?) ORDER BY id`),
    seen: db.prepare("INSERT OR IGNORE INTO events_seen (id, seen_at) VALUES (?, ?)"),
    forget: db.prepare("DELETE FROM events_seen WHERE seen_at < ?"),
    joinRoom: db.prepare(`INSERT INTO online (room, user, tabs) VALUES (?, ?, 1)
      ON CONFLICT (room, user) DO UPDATE SET tabs = tabs + 1`),
    leaveRoom: db.prepare("UPDATE online SET tabs = tabs - 1 WHERE room = ? AND user = ?"),
    prune: db.prepare("DELETE FROM online WHERE room = ? AND tabs <= 0"),
    vacate: db.prepare("DELETE FROM online WHERE room = ?"),
    online: db.prepare("SELECT user, tabs FROM online WHERE room = ? AND tabs > 0 ORDER BY user"),
  }

  /** Applies a batch of lifecycle events once each; returns how many were new. */
  const applyEvents = db.transaction((events, now) => {
    let applied = 0
    for(const e of events){
      if(typeof e.at === "number" && e.at < now - EVENT_ID_MS){ continue }
      if(q.seen.run(String(e.id), now).changes === 0){ continue }
      applied++
      // presence_join / presence_leave name the presence key; throng.toml
      // keys presences by the user id, so the key is the user.
      const who = e.key ?? e.user
      switch(e.type){
        case "presence_join": if(who != null){ q.joinRoom.run(e.topic, String(who)) } break
        case "presence_leave": if(who != null){ q.leaveRoom.run(e.topic, String(who)); q.prune.run(e.topic) } break
        // Its last subscriber gone everywhere: nobody is online there.
        case "vacated": q.vacate.run(e.topic); break
        default: break // connect, disconnect, occupied: nothing to keep here
      }
    }
    q.forget.run(now - EVENT_ID_MS)
    return applied
  })

  return {
    db,
    newSession(user){
      const token = randomBytes(32).toString("base64url")
      q.newSession.run(token, user, Date.now())
      return token
    },
    sessionUser(token){ return token ? q.session.get(token, Date.now() - SESSION_MS)?.user ?? null : null },
    dropSession(token){ if(token){ q.dropSession.run(token) } },
    banReason(user, room){ return q.ban.get(user, room)?.reason ?? null },
    saveMessage(room, user, body){
      const at = Date.now()
      const id = Number(q.save.run(room, user, body, at).lastInsertRowid)
      return {id, user, body, at}
    },
    lastMessages(room){ return q.last.all(room, HISTORY) },
    applyEvents: (events, now = Date.now()) => applyEvents(events, now),
    online(room){ return q.online.all(room) },
    close(){ db.close() },
  }
}
