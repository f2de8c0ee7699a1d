// phoenix.js Presence clients for the presence tests (e2e and cluster): each
// records its onJoin/onLeave/onSync calls and lists who is online.
import {Presence} from "phoenix"
import {connectPhoenix, closePhoenix, joinResult, withTimeout} from "./helpers.mjs"

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

/** Polls `check` every 10 ms until it returns truthy; throws after `ms` with `label()`. */
export async function until(check, ms, label){
  const deadline = Date.now() + ms
  for(;;){
    const value = await check()
    if(value){ return value }
    if(Date.now() > deadline){
      throw new Error(`timed out after ${ms} ms waiting for ${typeof label === "function" ? label() : label}`)
    }
    await sleep(10)
  }
}

/**
 * A phoenix.js socket joined to `topic` with `{user}` as join params, with a
 * phoenix.js Presence on the channel. `online()` is {user: metas} in key order.
 */
export async function presenceClient(wsUrl, user, {vsn = "2.0.0", topic = "rooms:lobby", socketOpts = {}} = {}){
  const socket = await connectPhoenix(wsUrl, vsn, socketOpts)
  const channel = socket.channel(topic, {user})
  const presence = new Presence(channel)
  const c = {user, vsn, socket, channel, presence, joins: [], leaves: [], syncs: 0, states: 0, diffs: 0}
  presence.onJoin((key, current, joined) => c.joins.push({key, current, joined}))
  presence.onLeave((key, current, left) => c.leaves.push({key, current, left}))
  presence.onSync(() => { c.syncs++ })
  channel.on("presence_state", () => { c.states++ })
  channel.on("presence_diff", () => { c.diffs++ })
  const res = await joinResult(channel)
  if(res.status !== "ok"){ throw new Error(`${user}: join ${topic}: ${JSON.stringify(res)}`) }
  /** {user: [metas]} as phoenix.js lists it, keys sorted */
  c.online = () => Object.fromEntries(presence.list((key, {metas}) => [key, metas]).sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0))
  /** {user: number of metas} */
  c.counts = () => Object.fromEntries(Object.entries(c.online()).map(([k, metas]) => [k, metas.length]))
  /** waits until counts() equals `want` */
  c.await = (want, ms = 5000) => until(() => JSON.stringify(c.counts()) === JSON.stringify(sorted(want)), ms,
    () => `${user} (${vsn}) to list ${JSON.stringify(sorted(want))}, lists ${JSON.stringify(c.counts())}`)
  c.leavesOf = key => c.leaves.filter(l => l.key === key)
  c.joinsOf = key => c.joins.filter(j => j.key === key)
  c.close = () => closePhoenix(socket)
  c.leave = () => withTimeout(new Promise(resolve => channel.leave().receive("ok", resolve)), 5000, `${user} leave`)
  return c
}

export function sorted(obj){
  return Object.fromEntries(Object.entries(obj).sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0))
}

export async function closeAll(clients){
  await Promise.all(clients.map(c => c.close().catch(() => {})))
}
