//! The Lua scripts that change presence in Redis, each one atomic step.
//!
//! Keys (`P` = `throng:p:`, `N` = a node id in 16 hex digits, `T` a topic):
//! - `P a:N`: node N is alive (a string with a TTL it refreshes), its
//!   value the token of N's current session with Redis;
//! - `P e:N:T`: N's presences on T (a hash: 8-byte seq -> value, `wire.rs`);
//! - `P n:T`: the nodes with presences on T (a set);
//! - `P t:N`: the topics N has presences on (a set, to clean up after N);
//! - `P nodes`: every node that has written presence (a set).
//!
//! Channels: `P T` carries T's changes (`wire.rs` messages).
//!
//! The token fences a session's changes: a change script sent on a
//! connection the node has since given up (a reply that never came back:
//! a stall, a partition) may still reach Redis later, after the node's new
//! session rewrote its state; carrying the old token, it changes nothing,
//! where it would otherwise bring back a presence that left meanwhile (a
//! ghost) or publish a stale diff.
//!
//! The scripts name keys they build from their arguments, which is fine
//! on one Redis server, not on a Redis Cluster, where a script must touch
//! one slot: there the `_SHARDED` scripts below do one topic each, on the
//! hash-tagged names of `names.rs`.

/// A node's changes on one topic, if the node is still alive in the
/// session that sent them; returns 0 (and changes nothing) when its
/// liveness key is gone or holds another session's token, so the node
/// knows the others may have dropped its presences and rewrites them all
/// (a stale script's 0 reaches no one).
///
/// KEYS: `a:N`, `e:N:T`, `n:T`, `t:N`. ARGV: N, T, channel, message, the
/// session's token, number of (field, value) pairs, the pairs, then the
/// fields to delete.
pub const FLUSH: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[5] then return 0 end
local last = 6 + 2 * tonumber(ARGV[6])
local i = 7
while i <= last do
  local j = math.min(i + 999, last)
  redis.call('HSET', KEYS[2], unpack(ARGV, i, j))
  i = j + 1
end
while i <= #ARGV do
  local j = math.min(i + 999, #ARGV)
  redis.call('HDEL', KEYS[2], unpack(ARGV, i, j))
  i = j + 1
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('SADD', KEYS[3], ARGV[1])
  redis.call('SADD', KEYS[4], ARGV[2])
else
  redis.call('SREM', KEYS[3], ARGV[1])
  redis.call('SREM', KEYS[4], ARGV[2])
end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
"#;

/// A node's whole state, written at once (after connecting, or after
/// finding its liveness key gone): every topic's hash replaced and its
/// replace message published, topics it no longer has cleared (with an
/// empty replace message), then the liveness key set. Being one step, no
/// reader sees the node alive with half its presences written.
///
/// KEYS: `a:N`, `t:N`, `nodes`. ARGV: N, TTL ms, key prefix, channel
/// prefix, the empty replace message, the session's token, number of
/// topics, then per topic: T, its replace message, number of pairs, the
/// pairs.
pub const RESYNC: &str = r#"
local node, prefix, chans = ARGV[1], ARGV[3], ARGV[4]
local keep = {}
local i = 8
for _ = 1, tonumber(ARGV[7]) do
  local topic, msg, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  i = i + 3
  local e = prefix .. 'e:' .. node .. ':' .. topic
  redis.call('DEL', e)
  local last = i + 2 * n - 1
  while i <= last do
    local j = math.min(i + 999, last)
    redis.call('HSET', e, unpack(ARGV, i, j))
    i = j + 1
  end
  if n > 0 then
    redis.call('SADD', prefix .. 'n:' .. topic, node)
    redis.call('SADD', KEYS[2], topic)
    keep[topic] = true
  end
  redis.call('PUBLISH', chans .. topic, msg)
end
for _, topic in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if not keep[topic] then
    redis.call('DEL', prefix .. 'e:' .. node .. ':' .. topic)
    redis.call('SREM', prefix .. 'n:' .. topic, node)
    redis.call('SREM', KEYS[2], topic)
    redis.call('PUBLISH', chans .. topic, ARGV[5])
  end
end
redis.call('SET', KEYS[1], ARGV[6], 'PX', ARGV[2])
redis.call('SADD', KEYS[3], node)
return 1
"#;

/// Removes a dead node's presences (if its liveness key is still gone:
/// returns 0 when it came back), telling every topic's watchers with an
/// empty replace message.
///
/// KEYS: `a:D`, `t:D`, `nodes`. ARGV: D, key prefix, channel prefix, the
/// empty replace message of D.
pub const CLEAN: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local node, prefix, chans = ARGV[1], ARGV[2], ARGV[3]
for _, topic in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  redis.call('DEL', prefix .. 'e:' .. node .. ':' .. topic)
  redis.call('SREM', prefix .. 'n:' .. topic, node)
  redis.call('PUBLISH', chans .. topic, ARGV[4])
end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], node)
return 1
"#;

/// On a Redis Cluster: a node's changes on one topic (the topic's keys
/// only, so one slot; the liveness check and the node's topic set are the
/// caller's, in separate steps). Returns 1 when the node still has
/// presences there, else 0.
///
/// KEYS: `{T}:e:N`, `{T}:n`. ARGV: N, channel, message, number of
/// (field, value) pairs, the pairs, then the fields to delete.
pub const FLUSH_SHARDED: &str = r#"
local last = 4 + 2 * tonumber(ARGV[4])
local i = 5
while i <= last do
  local j = math.min(i + 999, last)
  redis.call('HSET', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
while i <= #ARGV do
  local j = math.min(i + 999, #ARGV)
  redis.call('HDEL', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('SPUBLISH', ARGV[2], ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('SADD', KEYS[2], ARGV[1])
  return 1
end
redis.call('SREM', KEYS[2], ARGV[1])
return 0
"#;

/// On a Redis Cluster: a node's whole state on one topic, replaced (its
/// rewrite is one of these per topic, then its liveness key; burying a
/// dead node is one per topic with no pairs).
///
/// KEYS: `{T}:e:N`, `{T}:n`. ARGV: N, channel, replace message, number of
/// pairs, the pairs.
pub const REPLACE_SHARDED: &str = r#"
redis.call('DEL', KEYS[1])
local last = 4 + 2 * tonumber(ARGV[4])
local i = 5
while i <= last do
  local j = math.min(i + 999, last)
  redis.call('HSET', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
if tonumber(ARGV[4]) > 0 then
  redis.call('SADD', KEYS[2], ARGV[1])
else
  redis.call('SREM', KEYS[2], ARGV[1])
end
redis.call('SPUBLISH', ARGV[2], ARGV[3])
return 1
"#;
