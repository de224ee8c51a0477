//! Prometheus text exposition of the per-group families, written straight into the answer.
//! They have one series per (consumer group, topic): 10,000 groups × topics make 60,000
//! series, and building them through the `prometheus` crate's registry (a hashed child per
//! label set, label pairs allocated one by one, then gathered and encoded) took 0.65 s of
//! broker CPU per scrape (`conveyor bench scrape`, docs/benchmarks.md). Writing the lines
//! costs a fraction of that. The small families stay in the registry.

use std::fmt::Write;

/// Starts a family: its `# HELP` and `# TYPE` lines.
pub fn family(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One sample: `name{label="value",...} value`.
pub fn sample(
    out: &mut String,
    name: &str,
    labels: &[(&str, &str)],
    value: impl std::fmt::Display,
) {
    out.push_str(name);
    out.push('{');
    for (i, (label, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(label);
        out.push_str("=\"");
        escape_value(out, v);
        out.push('"');
    }
    let _ = writeln!(out, "}} {value}");
}

/// A label value as the text format wants it: backslash, double quote and newline escaped.
fn escape_value(out: &mut String, v: &str) {
    if !v.contains(['\\', '"', '\n']) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_follow_the_text_format_and_escape_values() {
        let mut out = String::new();
        family(&mut out, "m", "Help.", "gauge");
        sample(&mut out, "m", &[("a", "x"), ("b", "q\"u\\o\nte")], -3);
        assert_eq!(
            out,
            "# HELP m Help.\n# TYPE m gauge\nm{a=\"x\",b=\"q\\\"u\\\\o\\nte\"} -3\n"
        );
    }
}
