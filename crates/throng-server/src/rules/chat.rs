//! What `[[topics]]` rules over the built-in chat app's topics mean: the
//! chat channel (`crate::protocol::phoenix::chat`) serves every `rooms:*`
//! topic the rules let through, where a pushed `new:msg` is broadcast as
//! `{"body", "user"}` only; [`rule_warnings`] tells the operator, at start
//! and in `check-config`.

/// The chat app's topics: `rooms:*`.
const CHAT_TOPICS: &str = "rooms:";

/// What a start with `rules` should tell the operator about the chat app:
/// a rule whose pattern covers `rooms:*` topics sends them to the chat
/// channel, not to the relay channel its other topics get.
pub fn rule_warnings(rules: &[crate::rules::TopicRule]) -> Vec<String> {
    let covers = |pattern: &str| match pattern.find(['*', '{']) {
        None => pattern.starts_with(CHAT_TOPICS),
        Some(i) => pattern[..i].starts_with(CHAT_TOPICS) || CHAT_TOPICS.starts_with(&pattern[..i]),
    };
    // Where the chat channel does what the relay would not: a push of
    // new:msg or presence:update that reaches it (not the backend's).
    let differs = |r: &crate::rules::TopicRule| {
        let events = r.push.iter().chain(r.anonymous_push.iter().flatten());
        let pushed = |e: &str| events.clone().any(|p| p == "*" || p == e);
        r.join != crate::rules::JoinRule::Nobody
            && !r.hooks.contains(&crate::rules::TopicHook::Push)
            && (pushed("new:msg") || pushed("presence:update"))
    };
    rules
        .iter()
        .filter(|r| covers(&r.pattern) && differs(r))
        .map(|r| {
            format!(
                "[[topics]] pattern = {:?} covers rooms:* topics, which the built-in chat \
                 channel serves (not the relay channel): there a pushed new:msg is broadcast \
                 as {{\"body\", \"user\"}} only (other keys are dropped) and answered \
                 {{\"msg\": body}}; other events are relayed as they came. Every rooms:* \
                 topic the rules let through can be joined. For topics whose new:msg must \
                 reach subscribers untouched, use a prefix of your own (e.g. pattern = \
                 \"chat:*\")",
                r.pattern
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(patterns: &[&str]) -> Vec<crate::rules::TopicRule> {
        patterns
            .iter()
            .map(|p| serde_json::from_str(&format!("{{\"pattern\":{p:?}}}")).unwrap())
            .collect()
    }

    #[test]
    fn rules_over_chat_topics_are_named() {
        let patterns = [
            "rooms:*",
            "rooms:general",
            "*",
            "room*",
            "chat:*",
            "private:{user}",
            "{user}:x",
        ];
        let warned = rule_warnings(&rules(&patterns));
        let named: Vec<bool> = patterns
            .iter()
            .map(|p| {
                let said = format!("pattern = {p:?} covers");
                warned.iter().any(|w| w.contains(&said))
            })
            .collect();
        assert_eq!(
            named,
            [true, true, true, true, false, false, true],
            "{warned:#?}"
        );
        assert!(
            warned[0].contains("use a prefix of your own"),
            "{}",
            warned[0]
        );
        // Where the chat channel does what the relay would: no warning.
        let quiet: Vec<crate::rules::TopicRule> = serde_json::from_str(
            r#"[{"pattern":"rooms:*","hooks":["join","push"]},
                {"pattern":"rooms:a","push":["typing"]},
                {"pattern":"rooms:b","join":"nobody"}]"#,
        )
        .unwrap();
        assert!(rule_warnings(&quiet).is_empty());
    }
}
