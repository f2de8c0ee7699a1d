//! One definition per setting: the [`settings!`] macro, which turns one
//! field into the flag, its `THRONG_*` variable, its config-file key, its
//! `--help` text and its default, and the pieces it is built from
//! ([`Layer`], [`help`], [`pass_on`]). Each settings group (the top-level
//! keys in `flags.rs`, `[auth]` in `auth.rs`, `[hooks]` in
//! `hooks/settings.rs`, the limits in `limits.rs`) is one `settings!`
//! struct; ripgrep keeps its flags the same way (one definition each, in
//! its crates/core/flags/defs.rs, from which help and docs are generated).
//!
//! What one field gives:
//! - the flag: clap's derive, from the field's name (`idle_timeout` is
//!   `--idle-timeout`) and its `#[arg(...)]` (env variable, value name,
//!   heading, parser);
//! - the help: the doc comment, with `[default: VALUE]` appended when the
//!   field states its default (`= 60`); a default that is described rather
//!   than a value ("number of cores") is written in the doc comment;
//! - the file key: serde's derive, from the same name (in the group's
//!   table), optional like the flag; `#[serde(skip_deserializing)]` for a
//!   flag that is no key (worker plumbing, test hooks: still passed on);
//! - the default: `= VALUE` after the field, read back through the
//!   accessor of the same name (`args.idle_timeout()`);
//! - the precedence: `flags.or(file)`, field by field (a flag over the
//!   file; a switch set in either is on; a list given as flags replaces
//!   the file's);
//! - the worker's command line: [`pass_on`] spells every field that is set
//!   as its flag (a secret, whose env value `--help` hides, as its
//!   variable instead), so `--workers` hands each worker the same struct.

use std::fmt::Display;

use serde::Serialize;

/// How a layer of settings (the flags) lies over another (the file).
pub trait Layer {
    /// The setting's value once its default is applied.
    type Value;
    /// `self` over `under`.
    fn or(self, under: Self) -> Self;
    /// The value, or `default` when unset.
    fn get(&self, default: Self::Value) -> Self::Value;
}

/// A value: the upper one when set.
impl<T: Clone> Layer for Option<T> {
    type Value = T;
    fn or(self, under: Self) -> Self {
        self.or(under)
    }
    fn get(&self, default: T) -> T {
        self.clone().unwrap_or(default)
    }
}

/// A switch (`--echo`): on when either sets it.
impl Layer for bool {
    type Value = bool;
    fn or(self, under: Self) -> Self {
        self || under
    }
    fn get(&self, default: bool) -> bool {
        *self || default
    }
}

/// A repeatable flag (`--presence`): the upper list when it has any.
impl<T: Clone> Layer for Vec<T> {
    type Value = Vec<T>;
    fn or(self, under: Self) -> Self {
        if self.is_empty() {
            under
        } else {
            self
        }
    }
    fn get(&self, default: Vec<T>) -> Vec<T> {
        if self.is_empty() {
            default
        } else {
            self.clone()
        }
    }
}

/// A default as `--help` shows it (`20.0` as `20`).
pub fn shown<V: Display>(value: V) -> String {
    value.to_string()
}

/// The help of a flag: its doc comment's lines joined (as clap's derive
/// joins them, a single trailing period dropped), then the default.
pub fn help(doc: &str, default: Option<String>) -> String {
    let mut text = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.ends_with('.') && !text.ends_with("..") {
        text.pop();
    }
    match default {
        Some(d) => format!("{text} [default: {d}]"),
        None => text,
    }
}

/// A command line and environment for another `throng serve` process.
#[derive(Debug, Default)]
pub struct PassOn {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Adds to `out` every field of `group` that is set, as `throng serve`
/// takes it: `--flag VALUE` (repeated for a list, the bare flag for a
/// switch that is on), or, for a secret (an argument whose env value
/// `--help` hides), its environment variable, which `ps` does not show.
/// The fields of groups flattened into `group` are not in its serde shape
/// (`#[serde(skip)]`): the macro's `pass_on` passes each group on itself.
pub fn pass_on<A: clap::Args + Serialize>(group: &A, out: &mut PassOn) {
    let cmd = A::augment_args(clap::Command::new("serve"));
    let Ok(serde_json::Value::Object(map)) = serde_json::to_value(group) else {
        return;
    };
    for arg in cmd.get_arguments() {
        let (Some(long), Some(value)) = (arg.get_long(), map.get(arg.get_id().as_str())) else {
            continue;
        };
        let text = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let values: Vec<String> = match value {
            serde_json::Value::Null | serde_json::Value::Bool(false) => continue,
            serde_json::Value::Bool(true) if !arg.get_action().takes_values() => {
                out.args.push(format!("--{long}"));
                continue;
            }
            serde_json::Value::Array(items) => items.iter().map(text).collect(),
            v => vec![text(v)],
        };
        if values.is_empty() {
            continue;
        }
        match arg.get_env().and_then(|e| e.to_str()) {
            Some(var) if arg.is_hide_env_values_set() => {
                out.env.push((var.to_string(), values.join(" ")));
            }
            _ => {
                for v in values {
                    out.args.extend([format!("--{long}"), v]);
                }
            }
        }
    }
}

/// Parses a whole number of 0 or more, saying so for a negative one.
pub fn whole<T: std::str::FromStr>(s: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    s.trim().parse().map_err(|e| {
        if s.trim_start().starts_with('-') {
            "must be 0 or more".to_string()
        } else {
            format!("{e}: want a whole number, such as 10")
        }
    })
}

/// Defines a settings group: see this module's doc. The fields are
/// settings (a doc comment, `#[arg(...)]`, optional `#[serde(...)]`, the
/// type as the flag takes it: `Option<T>`, `bool` or `Vec<T>`, and an
/// optional `= DEFAULT`); the optional `groups { ... }` are other
/// `settings!` structs flattened into this one's flags (`#[command(...)]`),
/// whose file keys the caller reads (a table, or flattened).
macro_rules! settings {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                #[arg($($arg:tt)*)]
                $(#[serde($($serde:tt)*)])*
                pub $field:ident : $ty:ty $(= $default:expr)?,
            )*
        }
        $(
            groups {
                $(
                    $(#[doc = $gdoc:literal])*
                    #[command($($cmd:tt)*)]
                    pub $gfield:ident : $gty:ty,
                )*
            }
        )?
    ) => {
        #[derive(clap::Args, serde::Deserialize, serde::Serialize, Debug, Default, Clone)]
        $(#[$meta])*
        $vis struct $name {
            $(
                // No doc attribute: clap would take it as the help too.
                #[arg(
                    $($arg)*,
                    help = $crate::setting::help(
                        concat!($($doc, " ",)* ""),
                        None $(.or(Some($crate::setting::shown::<
                            <$ty as $crate::setting::Layer>::Value,
                        >($default))))?,
                    )
                )]
                #[serde(default)]
                $(#[serde($($serde)*)])*
                pub $field: $ty,
            )*
            $($(
                $(#[doc = $gdoc])*
                #[command($($cmd)*)]
                #[serde(skip)]
                pub $gfield: $gty,
            )*)?
        }

        #[allow(dead_code)]
        impl $name {
            $($(
                #[doc = concat!("`", stringify!($field), "` with its default.")]
                pub fn $field(&self) -> <$ty as $crate::setting::Layer>::Value {
                    $crate::setting::Layer::get(&self.$field, $default)
                }
            )?)*

            /// These settings (the flags) over `under` (the file), field by
            /// field, and each group over its own.
            pub fn or(self, under: Self) -> Self {
                Self {
                    $($field: $crate::setting::Layer::or(self.$field, under.$field),)*
                    $($($gfield: self.$gfield.or(under.$gfield),)*)?
                }
            }

            /// Adds every setting that is set, this group's and its
            /// groups', to `out` as flags (secrets as variables).
            pub fn pass_on(&self, out: &mut $crate::setting::PassOn) {
                $crate::setting::pass_on(self, out);
                $($(self.$gfield.pass_on(out);)*)?
            }
        }
    };
}
pub(crate) use settings;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_joins_lines_and_shows_the_default() {
        assert_eq!(
            help(" Seconds\n a poll  waits ", None),
            "Seconds a poll waits"
        );
        assert_eq!(
            help(" One line.", Some(shown(20.0))),
            "One line [default: 20]"
        );
        assert_eq!(help(" Two. Sentences.", None), "Two. Sentences");
    }
}
