// The backend's settings, each set in one place. The ports and the hook
// secret are throng.toml's (beside this file; throng reads the same file):
// throng's port is its `port`, the backend's the port of its `[hooks] url`,
// the secret its `[hooks] secret`. The environment variables throng reads
// (THRONG_PORT, THRONG_HOOK_URL, THRONG_HOOK_SECRET) override them for both
// programs alike, so the two never disagree. The SQLite file lives in a
// data directory outside the checkout.
import {mkdirSync, readFileSync} from "node:fs"
import {homedir} from "node:os"
import path from "node:path"
import {fileURLToPath} from "node:url"
import {parse} from "smol-toml"

const here = path.dirname(fileURLToPath(import.meta.url))
export const CONFIG_FILE = path.join(here, "throng.toml")
/** throng's own default port, for a throng.toml without `port`. */
const THRONG_DEFAULT_PORT = 4000

/** The port of an http(s) URL, its scheme's default when it names none. */
function urlPort(url){
  const u = new URL(url)
  return Number(u.port || (u.protocol === "https:" ? 443 : 80))
}

/**
 * Where the chat's SQLite file goes: CHAT_DB, else chat.db in
 * $XDG_DATA_HOME/throng-example-backend (~/.local/share/... without it),
 * never inside the repository. Creates the folder.
 */
function databaseFile(env){
  if(env.CHAT_DB){ return env.CHAT_DB }
  const data = env.XDG_DATA_HOME || path.join(homedir(), ".local", "share")
  const dir = path.join(data, "throng-example-backend")
  try {
    mkdirSync(dir, {recursive: true})
  } catch(e){
    throw new Error(`cannot create ${dir} for the chat's SQLite file: ${e.message}; set CHAT_DB to a file in a folder you can write`)
  }
  return path.join(dir, "chat.db")
}

/**
 * Reads throng.toml and the environment. Returns {port, host, secret,
 * secretIsFiles, db, chatUrl(req)}: `chatUrl` is where a logged-in browser
 * goes, throng's page on the host the browser used (THRONG_URL overrides).
 */
export function settings(env = process.env){
  let file
  try {
    file = parse(readFileSync(CONFIG_FILE, "utf8"))
  } catch(e){
    throw new Error(`cannot read ${CONFIG_FILE}: ${e.message}`)
  }
  const hookUrl = env.THRONG_HOOK_URL || file.hooks?.url
  if(!hookUrl){ throw new Error(`${CONFIG_FILE} has no [hooks] url and THRONG_HOOK_URL is not set: the backend's address comes from it`) }
  const throngPort = Number(env.THRONG_PORT || file.port || THRONG_DEFAULT_PORT)
  const secret = env.THRONG_HOOK_SECRET || file.hooks?.secret
  if(!secret){ throw new Error(`${CONFIG_FILE} has no [hooks] secret and THRONG_HOOK_SECRET is not set`) }
  return {
    port: Number(env.PORT ?? urlPort(hookUrl)),
    host: env.HOST || new URL(hookUrl).hostname,
    secret,
    secretIsFiles: !env.THRONG_HOOK_SECRET,
    db: databaseFile(env),
    chatUrl: req => env.THRONG_URL || `${req.protocol}://${req.hostname}:${throngPort}/`,
  }
}
