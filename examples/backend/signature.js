// Checking that a request comes from throng: every hook request carries
//   x-throng-signature: sha256=<hex HMAC-SHA256(secret, raw body)>
// and the connect, join and push bodies carry `at` (Unix milliseconds,
// under the signature), so a recorded request replayed later is refused
// too. An events batch is a JSON array of events: `at` is when each
// happened (a retried batch keeps it), `sent_at` when the batch was sent
// (written at each attempt), so `sent_at` is the one checked; and a batch
// delivered twice applies each event once, by its id (db.js).
import {createHmac, timingSafeEqual} from "node:crypto"

/** The signature throng sends for `body` (a Buffer). */
export function sign(secret, body){
  return "sha256=" + createHmac("sha256", secret).update(body).digest("hex")
}

/** Whether `header` is the signature of `body`, compared in constant time. */
export function signed(secret, body, header){
  const want = Buffer.from(sign(secret, body))
  const got = Buffer.from(typeof header === "string" ? header : "")
  return got.length === want.length && timingSafeEqual(got, want)
}

/**
 * A hook request checked: `{json}`, its parsed body, or `{refused}`, why it
 * must be refused: a missing or wrong signature, a body that is not JSON,
 * or a timestamp (an object's `at`, each event's `sent_at`) missing or
 * more than `maxAgeMs` away from now.
 */
export function verify({secret, maxAgeMs, body, header, now = Date.now()}){
  if(!signed(secret, body, header)){ return {refused: "bad signature"} }
  let json
  try { json = JSON.parse(body.toString("utf8")) } catch(_e){ return {refused: "body is not JSON"} }
  const stamps = Array.isArray(json) ? json.map(e => e?.sent_at) : [json?.at]
  for(const at of stamps){
    if(typeof at !== "number"){ return {refused: "no timestamp"} }
    if(Math.abs(now - at) > maxAgeMs){ return {refused: "stale timestamp"} }
  }
  return {json}
}
