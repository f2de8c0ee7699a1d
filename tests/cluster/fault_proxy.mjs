// A test-only TCP proxy between throng and redis-server that injects the
// faults of a flaky network, on the test's command:
//
// - latency(ms): every chunk, in each direction, is forwarded `ms` after it
//   arrived (in order; a round trip gains 2 x ms);
// - stall(): no byte is forwarded (new connections are accepted and wait
//   too) until resume(), which forwards everything held back, in order: a
//   command the client gave up on still reaches Redis then, as TCP would
//   retransmit it after a network stall. resume({lateMs}) lets the
//   connections opened before the stall wait lateMs more: their bytes
//   reach Redis after those of the connections made since (a sender's
//   retransmission timer backed off further than a new connection's);
// - drop(): every connection is reset (RST) on both sides;
// - halfOpen(): the peer is gone without a FIN: every connection open now
//   stops forwarding and is never closed by the proxy (the bytes are lost);
//   new connections work. heal() ends it, closing the dead ones;
// - partition(): halfOpen() for every connection, new ones included, until
//   heal(): Redis is unreachable from behind this proxy (a connection is
//   accepted but nothing comes back, as a connect over a dead network
//   path that never completes).
//
// Each throng node reaches Redis through its own proxy when the test needs
// one node cut off while the others keep Redis.
import net from "node:net"

/** One direction of a connection: chunks in order, each due at a time. */
class Lane {
  constructor(proxy, pair, to){
    this.proxy = proxy
    this.pair = pair
    this.to = to
    this.queue = [] // [{due, chunk}]
    this.timer = null
    this.dead = false
  }

  push(chunk){
    if(this.dead){ return }
    const last = this.queue.length ? this.queue[this.queue.length - 1].due : 0
    this.queue.push({due: Math.max(Date.now() + this.proxy.delay, last), chunk})
    this.pump()
  }

  pump(){
    if(this.timer || this.dead){ return }
    while(this.queue.length && !this.pair.stalled){
      const wait = this.queue[0].due - Date.now()
      if(wait > 0){
        this.timer = setTimeout(() => { this.timer = null; this.pump() }, wait)
        return
      }
      const {chunk} = this.queue.shift()
      if(!this.to.destroyed){ this.to.write(chunk) }
    }
    if(!this.queue.length && this.endAfter){ this.endAfter() }
  }

  /** Ends `to` once everything queued is written (a FIN after the data). */
  end(){
    this.endAfter = () => { this.endAfter = null; if(!this.to.destroyed){ this.to.end() } }
    if(!this.queue.length && !this.pair.stalled){ this.endAfter() }
  }

  kill(){
    this.dead = true
    this.queue = []
    clearTimeout(this.timer)
    this.timer = null
  }
}

/** A proxied connection: the client's socket, Redis's, and a lane each way. */
class Pair {
  constructor(proxy, client, targetPort){
    this.proxy = proxy
    this.client = client
    this.dark = proxy.blackhole
    this.stalled = proxy.stalled
    this.upstream = net.connect({port: targetPort, host: "127.0.0.1"})
    this.up = new Lane(proxy, this, this.upstream)
    this.down = new Lane(proxy, this, client)
    for(const s of [client, this.upstream]){
      s.setNoDelay(true)
      s.on("error", () => {})
    }
    client.on("data", d => { if(!this.dark){ this.up.push(d) } })
    this.upstream.on("data", d => { if(!this.dark){ this.down.push(d) } })
    // A FIN from one side goes on after its data, unless the path is dead.
    client.on("end", () => { if(!this.dark){ this.up.end() } })
    this.upstream.on("end", () => { if(!this.dark){ this.down.end() } })
    const closed = () => {
      if(this.dark){ return } // nothing crosses a dead path, a close neither
      if(client.destroyed && this.upstream.destroyed){ proxy.pairs.delete(this) }
    }
    // A reset closes without an "end": the other side gets its FIN after the data.
    client.on("close", () => { if(!this.dark){ this.up.end() } closed() })
    this.upstream.on("close", () => { if(!this.dark){ this.down.end() } closed() })
  }

  /** The peer is gone: nothing crosses any more, and nothing closes. */
  goDark(){
    this.dark = true
    this.up.kill()
    this.down.kill()
  }

  reset(){
    this.up.kill()
    this.down.kill()
    for(const s of [this.client, this.upstream]){
      if(!s.destroyed){ s.resetAndDestroy() }
    }
    this.proxy.pairs.delete(this)
  }
}

/**
 * Starts a proxy on 127.0.0.1 (`port`, or a free one) to redis-server on
 * `targetPort`. Returns the controls described above, and `url`.
 */
export async function startProxy(targetPort, {port = 0} = {}){
  const proxy = {
    delay: 0,
    stalled: false,
    blackhole: false,
    pairs: new Set(),
    accepted: 0,
  }
  const server = net.createServer(client => {
    proxy.accepted++
    proxy.pairs.add(new Pair(proxy, client, targetPort))
  })
  await new Promise((resolve, reject) => {
    server.once("error", reject)
    server.listen(port, "127.0.0.1", resolve)
  })
  const bound = server.address().port
  const unstall = pairs => { for(const p of pairs){ p.stalled = false; p.up.pump(); p.down.pump() } }
  return {
    port: bound,
    url: `redis://127.0.0.1:${bound}`,
    /** connections accepted so far */
    accepted: () => proxy.accepted,
    /** connections open now (dead ones included) */
    open: () => proxy.pairs.size,
    latency(ms){ proxy.delay = ms },
    stall(){
      proxy.stalled = true
      for(const p of proxy.pairs){ p.stalled = true; p.old = true }
    },
    resume({lateMs = 0} = {}){
      proxy.stalled = false
      const old = [...proxy.pairs].filter(p => p.old)
      unstall([...proxy.pairs].filter(p => !p.old))
      if(lateMs > 0){ setTimeout(() => unstall(old), lateMs) } else { unstall(old) }
    },
    drop(){ for(const p of [...proxy.pairs]){ p.reset() } },
    halfOpen(){ for(const p of proxy.pairs){ p.goDark() } },
    partition(){ proxy.blackhole = true; for(const p of proxy.pairs){ p.goDark() } },
    /** Ends a half-open or a partition: new connections work, the dead ones are reset. */
    heal(){
      proxy.blackhole = false
      for(const p of [...proxy.pairs]){ if(p.dark){ p.reset() } }
    },
    /** Back to a clean network: no latency, no stall, no dead path. */
    clear(){ this.latency(0); this.heal(); this.resume() },
    stop(){
      for(const p of [...proxy.pairs]){ p.reset() }
      return new Promise(resolve => server.close(() => resolve()))
    },
  }
}
