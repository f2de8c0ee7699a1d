//! The Lua scripts of the Redis history, each one atomic step.
//!
//! Keys of topic `T`, all with the hash tag `{T}` so that a topic's keys
//! live on one Redis Cluster slot (see [`super::redis::keys`]):
//! - `throng:hist:{T}:stream`: the messages, a stream whose entry IDs are
//!   `<offset>-1`, each with one field `m`, the version 2 envelope
//!   (`crate::backplane::envelope`) as it was published;
//! - `throng:hist:{T}:offset`: the last offset given (INCR);
//! - `throng:hist:{T}:epoch`: the epoch, 16 hex digits.
//!
//! All three expire `history_ttl` after the topic's last message. A
//! missing epoch (or offset) is history lost (Redis restarted without
//! persistence, keys evicted or expired): the next message starts a new
//! epoch, with the epoch the publishing node proposed, and the stream
//! starts over.

/// Gives the next message of a topic its position, keeps it and publishes
/// it, in one step; returns its ref.
///
/// KEYS: stream, epoch, offset. ARGV: a new epoch (16 hex digits) in case
/// the topic has none, the size to keep (MAXLEN ~), the ttl in seconds,
/// the topic's channel, the envelope's tail (`Envelope::positioned_tail`),
/// the publishing command (PUBLISH, or SPUBLISH on a Redis Cluster, where
/// the channel shares the keys' hash tag and so their slot).
pub const PUBLISH: &str = r#"
local epoch = redis.call('GET', KEYS[2])
if (not epoch) or redis.call('EXISTS', KEYS[3]) == 0 then
  epoch = ARGV[1]
  redis.call('SET', KEYS[2], epoch)
  redis.call('DEL', KEYS[1], KEYS[3])
end
local offset = redis.call('INCR', KEYS[3])
local at = epoch .. '.' .. string.format('%d', offset)
local env = '\2' .. string.char(0, 0, 0, #at) .. at .. ARGV[5]
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], string.format('%d-1', offset), 'm', env)
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[3])
redis.call(ARGV[6], ARGV[4], env)
return at
"#;

/// A topic's epoch, last offset and first messages, in one step: `{}` when
/// it has no history, else `{epoch, last, entries}`.
///
/// KEYS: stream, epoch, offset. ARGV: `after` (the entries from offset
/// ARGV[2] on) or `newest` (the newest ones), then the count.
pub const READ: &str = r#"
local epoch = redis.call('GET', KEYS[2])
local last = redis.call('GET', KEYS[3])
if (not epoch) or (not last) then return {} end
local entries
if ARGV[1] == 'after' then
  if tonumber(ARGV[2]) > tonumber(last) then
    entries = {}
  else
    entries = redis.call('XRANGE', KEYS[1], ARGV[2] .. '-0', '+', 'COUNT', ARGV[3])
  end
else
  entries = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[3])
end
return {epoch, last, entries}
"#;
