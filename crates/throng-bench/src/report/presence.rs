//! The report's presence part: [`PresenceReport`] (`presence` in the
//! JSON), from what `crate::presence` measures.

use serde::{Deserialize, Serialize};

use crate::stats::Summary;

/// Presence in a run (see [`crate::presence`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct PresenceReport {
    /// The rule, as `throng serve --presence` spells it (`null`: none
    /// given; a `--target` sent presence messages all the same).
    pub rule: Option<String>,
    /// `list` or `count` (the rule's; `null` without one).
    pub mode: Option<String>,
    /// What the embedded server was given for it, beyond `--server-arg`.
    pub server_args: Vec<String>,
    /// Messages the clients received, by kind: `presence_state`,
    /// `presence_diff`, `presence_count`, and every other message.
    pub state: TrafficRow,
    pub diff: TrafficRow,
    pub count: TrafficRow,
    pub other: TrafficRow,
    /// From the first arrival to the last presence message, seconds: the
    /// rates are over it.
    pub window_secs: f64,
    /// From the ramp-up's end (every join answered) to the last presence
    /// message, seconds: the run waits for it before the plateau, so the
    /// memory figures are taken with nothing queued (`null`: no rule).
    pub settle_secs: Option<f64>,
    /// Presence joins answered `ok` (their send times recorded).
    pub joins: u64,
    /// Presence messages (all three kinds) and their bytes per such join.
    pub messages_per_join: f64,
    pub bytes_per_join: f64,
    /// Join sent to its sight by the last subscriber, ms (`count`: joins
    /// measured).
    pub join_visible: Summary,
    /// Joins no subscriber was seen to hear of.
    pub join_visible_unseen: u64,
    /// How join visibility was measured (the mode's way).
    pub join_visible_method: String,
    /// Distinct diffs received; those no agent read (their keys unknown);
    /// joined keys that were not user ids.
    pub diffs_distinct: u64,
    pub diffs_unparsed: u64,
    pub keys_unmatched: u64,
    /// The server's own counts (its `/metrics`, summed over what the
    /// probe scraped): `presence_state` encodings and diffs made.
    pub server_state_encodes: Option<f64>,
    pub server_diffs: Option<f64>,
}

/// Messages and bytes of one kind, and their rates over the window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct TrafficRow {
    pub messages: u64,
    pub bytes: u64,
    pub messages_per_sec: f64,
    pub bytes_per_sec: f64,
}
