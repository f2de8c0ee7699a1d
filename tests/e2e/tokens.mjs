// Connect tokens minted the way the apps that issue them do, written here from the
// spec rather than with throng's code: Phoenix.Token.sign/4 (Plug.Crypto: PBKDF2-HMAC-
// SHA256 key, :erlang.term_to_binary({data, signed_at_ms, max_age}), HS256 MAC) and
// HS256 JWTs.
import {createHmac, pbkdf2Sync} from "node:crypto"

/** :erlang.term_to_binary of an integer, as Erlang writes it (no 131 tag). */
function extInteger(n){
  const big = BigInt(n)
  if(big >= 0n && big <= 255n){ return Buffer.from([97, Number(big)]) }
  if(big >= -(2n ** 31n) && big < 2n ** 31n){
    const b = Buffer.alloc(5)
    b[0] = 98
    b.writeInt32BE(Number(big), 1)
    return b
  }
  let m = big < 0n ? -big : big
  const digits = []
  while(m > 0n){ digits.push(Number(m & 0xffn)); m >>= 8n }
  return Buffer.from([110, digits.length, big < 0n ? 1 : 0, ...digits])
}

/** A binary (BINARY_EXT) or an integer, as term_to_binary writes the data. */
function extData(data){
  if(typeof data === "number" || typeof data === "bigint"){ return extInteger(data) }
  const bytes = Buffer.from(String(data), "utf8")
  const head = Buffer.alloc(5)
  head[0] = 109
  head.writeUInt32BE(bytes.length, 1)
  return Buffer.concat([head, bytes])
}

/** NEW_FLOAT_EXT: what term_to_binary writes for a float (`86400.0`). */
function extFloat(x){
  const b = Buffer.alloc(9)
  b[0] = 70
  b.writeDoubleBE(x, 1)
  return b
}

/** An atom key (SMALL_ATOM_UTF8_EXT), as OTP 26+ writes it. */
function extAtom(name){
  return Buffer.concat([Buffer.from([119, name.length]), Buffer.from(name, "latin1")])
}

/** Plug.Crypto.MessageVerifier.sign: `SFMyNTY.<term>.<HMAC-SHA256>` under the PBKDF2 key. */
function signTerm(secretKeyBase, salt, term){
  const key = pbkdf2Sync(secretKeyBase, salt, 1000, 32, "sha256")
  const plain = `${Buffer.from("HS256").toString("base64url")}.${term.toString("base64url")}`
  const mac = createHmac("sha256", key).update(plain).digest("base64url")
  return `${plain}.${mac}`
}

/**
 * Phoenix.Token.sign(secretKeyBase, salt, data, signed_at: .., max_age: ..): the term
 * {data, signed_at_ms, max_age}. `floatMaxAge`: the max age as a float (`max_age: 86400.0`).
 */
export function phoenixToken(secretKeyBase, salt, data, {signedAtMs = Date.now(), maxAge = 86400, floatMaxAge = false} = {}){
  const age = floatMaxAge ? extFloat(maxAge) : extInteger(maxAge)
  return signTerm(secretKeyBase, salt, Buffer.concat([Buffer.from([131, 104, 3]), extData(data), extInteger(signedAtMs), age]))
}

/** Phoenix 1.3/1.4's Phoenix.Token.sign: the map %{data: data, signed: signed_at_ms}, no max age. */
export function phoenixTokenLegacy(secretKeyBase, salt, data, {signedAtMs = Date.now()} = {}){
  const term = Buffer.concat([
    Buffer.from([131, 116, 0, 0, 0, 2]),
    extAtom("data"), extData(data),
    extAtom("signed"), extInteger(signedAtMs),
  ])
  return signTerm(secretKeyBase, salt, term)
}

/** An HS256 JWT of `claims`. */
export function jwtHS256(secret, claims){
  const part = obj => Buffer.from(JSON.stringify(obj)).toString("base64url")
  const plain = `${part({alg: "HS256", typ: "JWT"})}.${part(claims)}`
  return `${plain}.${createHmac("sha256", secret).update(plain).digest("base64url")}`
}

export const nowS = () => Math.floor(Date.now() / 1000)
