//! The `key=value` text bodies of RocketMQ's configuration requests (Java `Properties`
//! written by `MixAll.properties2String`): UPDATE_BROKER_CONFIG, GET_BROKER_CONFIG,
//! UPDATE_NAMESRV_CONFIG, GET_NAMESRV_CONFIG.

/// The pairs of a properties text, in order: blank and comment (`#`, `!`) lines skipped, the
/// key ending at the first `=` or `:`, both sides trimmed.
pub fn parse(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .map(|l| {
            let at = l.find(['=', ':']).unwrap_or(l.len());
            (
                l[..at].trim().to_string(),
                l.get(at + 1..).unwrap_or("").trim().to_string(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_skip_comments_and_split_at_the_first_separator() {
        let pairs = parse("# c\n! c\n a = b \nk:v=w\nflag\n\n");
        assert_eq!(
            pairs,
            vec![
                ("a".to_string(), "b".to_string()),
                ("k".to_string(), "v=w".to_string()),
                ("flag".to_string(), String::new()),
            ]
        );
    }
}
