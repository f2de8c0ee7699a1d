// A stand-in for Pusher's HTTP API on 127.0.0.1:0 that records what a server
// SDK sends (method, path, raw query, body) and answers each route with an
// empty success, so the SDKs' own signing can be captured byte for byte.
import http from "node:http"

/** Starts the capture server: {port, requests, close()}. */
export async function captureServer(){
  const requests = []
  const server = http.createServer((req, res) => {
    const chunks = []
    req.on("data", (c) => chunks.push(c))
    req.on("end", () => {
      const [path, query = ""] = req.url.split(/\?(.*)/s)
      requests.push({method: req.method, path, query, body: Buffer.concat(chunks).toString("utf8")})
      const answer = path.endsWith("/users") ? {users: []}
        : /\/channels\/[^/]+$/.test(path) ? {occupied: false}
        : path.endsWith("/channels") ? {channels: {}}
        : {}
      res.writeHead(200, {"content-type": "application/json"})
      res.end(JSON.stringify(answer))
    })
  })
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    port: server.address().port,
    requests,
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve) }),
  }
}
