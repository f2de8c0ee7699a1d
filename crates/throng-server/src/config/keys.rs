//! A config file's keys, checked against the settings before the file is
//! read (`ServeArgs::resolve`, which `serve` and `check-config` share):
//! each key that is none of them is reported on its own line, at its line
//! and column, with the nearest known key when it looks like a typo ("did
//! you mean") or the table it belongs in when it is a key of another one
//! (`history_size belongs in a [[topics]] table`). serde alone reports the
//! first unknown key only, and, for keys of the flattened top level, at
//! line 1 column 1.
//!
//! The keys come from the settings' definitions (`template::file_keys`)
//! and, for the arrays of tables that have no flags, from [`TOPIC_KEYS`]
//! and [`PRESENCE_KEYS`] (checked against their structs by the tests).

use std::path::Path;

use toml_edit::{ImDocument, Item, TableLike};

use super::template::{file_keys, FileKey, TABLE_ONLY};

/// The keys of a `[[topics]]` table (`crate::rules::TopicRule`).
pub(super) const TOPIC_KEYS: &[&str] = &[
    "pattern",
    "join",
    "push",
    "anonymous_push",
    "hooks",
    "history_size",
    "history_ttl",
];
/// The keys of a `[[presence]]` table (`crate::presence::RuleFile`).
pub(super) const PRESENCE_KEYS: &[&str] = &["pattern", "key", "mode"];

/// A key found where no setting has it.
struct Unknown {
    /// Byte offset of the key in the file.
    at: usize,
    text: String,
}

/// Checks the keys of `text` (the file at `path`): `Err` lists every
/// unknown key, one per line, each as `FILE:LINE:COLUMN: ...`; a file that
/// is no TOML gets the parser's error (with its line and column).
pub(super) fn check(path: &Path, text: &str) -> Result<(), String> {
    let doc = ImDocument::parse(text).map_err(|e| format!("{}: {e}", path.display()))?;
    let keys = file_keys();
    let mut found = Vec::new();
    top_level(doc.as_table(), &keys, &mut found);
    if found.is_empty() {
        return Ok(());
    }
    found.sort_by_key(|u| u.at);
    let lines: Vec<String> = found
        .iter()
        .map(|u| {
            let (line, column) = line_column(text, u.at);
            format!("{}:{line}:{column}: {}", path.display(), u.text)
        })
        .collect();
    Err(match lines.as_slice() {
        [one] => one.clone(),
        many => format!(
            "{} has {} unknown keys (`throng gen-config` prints every key):\n  {}",
            path.display(),
            many.len(),
            many.join("\n  ")
        ),
    })
}

/// 1-based line and column (in characters) of byte `at` of `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Where key `key` of `table` starts in the file.
fn at(table: &dyn TableLike, key: &str) -> usize {
    table
        .get_key_value(key)
        .and_then(|(k, _)| k.span())
        .map_or(0, |s| s.start)
}

fn top_level(table: &dyn TableLike, keys: &[FileKey], found: &mut Vec<Unknown>) {
    let tables: Vec<&str> = keys.iter().filter_map(|k| k.table).collect();
    for (key, item) in table.iter() {
        if keys.iter().any(|k| k.table.is_none() && k.key == key) && key != "presence" {
            continue;
        }
        if tables.contains(&key) {
            if let Some(inner) = item.as_table_like() {
                in_table(key, inner, keys, found);
            }
            continue;
        }
        if let Some(rows) = TABLE_ONLY.iter().find(|(t, _)| *t == key).map(|(t, _)| *t) {
            array_of_tables(rows, item, found);
            continue;
        }
        let text = format!("unknown key `{key}`{}", top_level_hint(key, keys));
        found.push(Unknown {
            at: at(table, key),
            text,
        });
    }
}

/// Where an unknown top-level key belongs, or the key it looks like.
fn top_level_hint(key: &str, keys: &[FileKey]) -> String {
    // An `--auth-*` or `--hook-*` flag spelt as a top-level key, or a bare
    // key of one of those tables.
    let in_table = keys.iter().find(|k| {
        k.table.is_some_and(|t| {
            let prefix = t.trim_end_matches('s');
            [format!("{t}_{}", k.key), format!("{prefix}_{}", k.key)].contains(&key.to_string())
                || key == k.key
        })
    });
    if let Some(k) = in_table {
        let t = k.table.unwrap_or_default();
        return format!("; {0} belongs in the [{t}] table: [{t}] {0} = ...", k.key);
    }
    if let Some(hint) = array_hint(key) {
        return hint;
    }
    let mut known: Vec<&str> = keys
        .iter()
        .filter(|k| k.table.is_none())
        .map(|k| k.key.as_str())
        .collect();
    known.extend(keys.iter().filter_map(|k| k.table));
    known.extend(TABLE_ONLY.iter().map(|(t, _)| *t));
    did_you_mean(key, known)
}

/// A key of `[[topics]]` or `[[presence]]` written elsewhere.
fn array_hint(key: &str) -> Option<String> {
    if TOPIC_KEYS.contains(&key) && key != "pattern" {
        return Some(format!(
            "; {key} belongs in a [[topics]] table, with the pattern of the topics it is for: \
             [[topics]] pattern = \"rooms:*\" {key} = ..."
        ));
    }
    if PRESENCE_KEYS.contains(&key) {
        return Some(format!(
            "; {key} belongs in a [[presence]] (or [[topics]]) table, with its pattern: \
             [[presence]] pattern = \"rooms:*\" key = \"user_id\""
        ));
    }
    None
}

fn did_you_mean<'a>(key: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    nearest(key, known.into_iter())
        .map(|n| format!("; did you mean `{n}`?"))
        .unwrap_or_default()
}

/// The unknown keys of table `name` (`[auth]`, `[hooks]`).
fn in_table(name: &str, table: &dyn TableLike, keys: &[FileKey], found: &mut Vec<Unknown>) {
    let known: Vec<&str> = keys
        .iter()
        .filter(|k| k.table == Some(name))
        .map(|k| k.key.as_str())
        .collect();
    for (key, item) in table.iter() {
        if known.contains(&key) {
            continue;
        }
        if name == "pusher" && key == "apps" {
            array_of_tables("pusher.apps", item, found);
            continue;
        }
        let top = keys.iter().any(|k| k.table.is_none() && k.key == key);
        // The flag's spelling in its table (`hook_connect` in [hooks]).
        let bare = key
            .strip_prefix(name.trim_end_matches('s'))
            .and_then(|k| k.strip_prefix('_'))
            .filter(|k| known.contains(k));
        let hint = if let Some(bare) = bare {
            format!("; did you mean `{bare}`?")
        } else if top {
            format!("; {key} is a top-level key: move it above the first [table] of the file")
        } else {
            let typo = did_you_mean(key, known.iter().copied());
            if typo.is_empty() {
                array_hint(key).unwrap_or_default()
            } else {
                typo
            }
        };
        found.push(Unknown {
            at: at(table, key),
            text: format!("unknown key `{key}` in [{name}]{hint}"),
        });
    }
}

/// The unknown keys of each `[[topics]]`, `[[presence]]` or
/// `[[pusher.apps]]` table.
fn array_of_tables(name: &str, item: &Item, found: &mut Vec<Unknown>) {
    let known = match name {
        "topics" => TOPIC_KEYS,
        "pusher.apps" => super::pusher::APP_KEYS,
        _ => PRESENCE_KEYS,
    };
    let tables: Vec<&dyn TableLike> = match item {
        Item::ArrayOfTables(a) => a.iter().map(|t| t as &dyn TableLike).collect(),
        Item::Value(toml_edit::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_inline_table())
            .map(|t| t as &dyn TableLike)
            .collect(),
        _ => return, // the wrong type: serde says so
    };
    for table in tables {
        for (key, _) in table.iter() {
            if known.contains(&key) {
                continue;
            }
            let other = match name {
                "topics" => ("presence", PRESENCE_KEYS),
                "pusher.apps" => ("pusher.apps", super::pusher::APP_KEYS),
                _ => ("topics", TOPIC_KEYS),
            };
            let hint = match did_you_mean(key, known.iter().copied()) {
                typo if !typo.is_empty() => typo,
                _ if other.1.contains(&key) => {
                    format!("; {key} belongs in a [[{}]] table", other.0)
                }
                _ => format!("; a [[{name}]] table takes {}", known.join(", ")),
            };
            found.push(Unknown {
                at: at(table, key),
                text: format!("unknown key `{key}` in [[{name}]]{hint}"),
            });
        }
    }
}

/// The known name closest to `key`, if it is close (a typo, not another word).
fn nearest<'a>(key: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    known
        .map(|k| (strsim::damerau_levenshtein(key, k), k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(text: &str) -> String {
        check(Path::new("f.toml"), text).unwrap_err()
    }

    #[test]
    fn unknown_keys_at_their_line_with_the_nearest() {
        let err = said(
            "port = 1\nidle_timout = 5\nauth_jwt_secret = \"x\"\nzzzzzzzz = 1\n\
             [auth]\njwt_secert = \"y\"\nport = 2\n",
        );
        let lines: Vec<&str> = err.lines().collect();
        assert!(lines[0].starts_with("f.toml has 5 unknown keys"), "{err}");
        assert_eq!(
            lines[1..],
            [
                "  f.toml:2:1: unknown key `idle_timout`; did you mean `idle_timeout`?",
                "  f.toml:3:1: unknown key `auth_jwt_secret`; jwt_secret belongs in the [auth] table: [auth] jwt_secret = ...",
                "  f.toml:4:1: unknown key `zzzzzzzz`",
                "  f.toml:6:1: unknown key `jwt_secert` in [auth]; did you mean `jwt_secret`?",
                "  f.toml:7:1: unknown key `port` in [auth]; port is a top-level key: move it above the first [table] of the file",
            ]
        );
    }

    #[test]
    fn a_key_of_another_table_says_where_it_belongs() {
        let err = said("port = 0\n  history_size = 100\n");
        assert!(
            err.starts_with("f.toml:2:3: unknown key `history_size`; history_size belongs in a [[topics]] table"),
            "{err}"
        );
        let err = said("[hooks]\nurl = \"http://x\"\nhook_connect = true\n");
        assert!(err.contains("did you mean `connect`?"), "{err}");
        let err = said("hook_url = \"http://x\"\n");
        assert!(err.contains("url belongs in the [hooks] table"), "{err}");
        let err = said("[[topics]]\npattern = \"a:*\"\nhistroy_size = 3\nmode = \"count\"\n");
        assert!(
            err.contains("f.toml:3:1: unknown key `histroy_size` in [[topics]]; did you mean `history_size`?"),
            "{err}"
        );
        assert!(
            err.contains("mode belongs in a [[presence]] table"),
            "{err}"
        );
        let err = said("[[presence]]\npattern = \"a\"\nkye = \"user_id\"\n");
        assert!(err.contains("did you mean `key`?"), "{err}");
    }

    #[test]
    fn known_keys_and_bad_syntax() {
        let ok = "port = 1\n[auth]\nmode = \"jwt\"\n[hooks]\nurl = \"http://x\"\n\
                  [[topics]]\npattern = \"a\"\nhistory_size = 1\n[[presence]]\npattern = \"b\"\nkey = \"user_id\"\n";
        assert_eq!(check(Path::new("f.toml"), ok), Ok(()));
        let err = said("port = = 1\n");
        assert!(
            err.starts_with("f.toml: TOML parse error at line 1, column"),
            "{err}"
        );
    }

    /// The lists of the arrays of tables are their structs' fields.
    #[test]
    fn array_keys_are_their_structs_fields() {
        let topic = TOPIC_KEYS
            .iter()
            .map(|k| match *k {
                "pattern" => "pattern = \"a\"".to_string(),
                "join" => "join = \"anyone\"".to_string(),
                "hooks" => "hooks = []".to_string(),
                "push" | "anonymous_push" => format!("{k} = []"),
                _ => format!("{k} = 1"),
            })
            .collect::<Vec<_>>()
            .join("\n");
        toml::from_str::<crate::rules::TopicRule>(&topic).unwrap();
        toml::from_str::<crate::presence::RuleFile>(
            "pattern = \"a\"\nkey = \"b\"\nmode = \"count\"",
        )
        .unwrap();
        assert!(toml::from_str::<crate::rules::TopicRule>("pattern = \"a\"\nx = 1").is_err());
    }
}
