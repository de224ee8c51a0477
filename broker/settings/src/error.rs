//! Parse errors that say where: section, key and line.

use std::fmt;

use serde::de::DeserializeOwned;

use crate::sections::{
    BrokerSection, ControllerSection, GrpcSection, HttpSection, NamesrvSection, ReplicationSection,
    StoreSection, TlsSection,
};
use crate::SECTIONS;

/// Why a settings file was refused. `Display` reads like
/// ``[broker] brokr-name (line 3): unknown field `brokr-name`, expected one of …``.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    section: Option<String>,
    key: Option<String>,
    line: Option<usize>,
    message: String,
}

impl ParseError {
    /// The section at fault (`"broker"`), or `None` for top-level and syntax errors.
    pub fn section(&self) -> Option<&str> {
        self.section.as_deref()
    }

    /// The key at fault (an unknown key, or a key with a bad value); for an unknown section,
    /// the section's name.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// 1-based line of the problem, when known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// What is wrong (serde's or toml's message, e.g. ``unknown field `x`, expected …``).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut place = Vec::new();
        match (&self.section, &self.key) {
            (Some(s), Some(k)) => place.push(format!("[{s}] {k}")),
            (Some(s), None) => place.push(format!("[{s}]")),
            (None, Some(k)) => place.push(k.clone()),
            (None, None) => {}
        }
        if let Some(line) = self.line {
            place.push(format!("(line {line})"));
        }
        if place.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", place.join(" "), self.message)
        }
    }
}

impl std::error::Error for ParseError {}

/// Locates the problem behind `err`, the error of parsing `text` as a whole: the line from its
/// span, then the section and key by checking each section, and each key on its own.
pub(crate) fn diagnose(text: &str, err: &toml::de::Error) -> ParseError {
    let line = err
        .span()
        .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
    let mut out = ParseError {
        section: None,
        key: None,
        line,
        message: err.message().trim_end().to_string(),
    };
    let Ok(table) = text.parse::<toml::Table>() else {
        return out; // a syntax error: toml's message and line say it all
    };
    for (name, value) in &table {
        let found = match name.as_str() {
            "namesrv" => check::<NamesrvSection>(value),
            "broker" => check::<BrokerSection>(value),
            "store" => check::<StoreSection>(value),
            "http" => check::<HttpSection>(value),
            "grpc" => check::<GrpcSection>(value),
            "tls" => check::<TlsSection>(value),
            "replication" => check::<ReplicationSection>(value),
            "controller" => check::<ControllerSection>(value),
            _ => {
                out.key = Some(name.clone());
                out.message = format!(
                    "unknown section, expected one of {}",
                    SECTIONS.map(|s| format!("[{s}]")).join(", ")
                );
                return out;
            }
        };
        if let Err((key, message)) = found {
            out.section = Some(name.clone());
            out.key = key;
            out.message = message;
            return out;
        }
    }
    out
}

/// Deserialises one section; on failure, the first key that fails on its own, and the message.
fn check<T: DeserializeOwned>(value: &toml::Value) -> Result<(), (Option<String>, String)> {
    let Err(e) = value.clone().try_into::<T>() else {
        return Ok(());
    };
    let message = e.message().trim_end().to_string();
    if let toml::Value::Table(table) = value {
        for (key, v) in table {
            let alone = toml::Table::from_iter([(key.clone(), v.clone())]);
            if let Err(e) = toml::Value::Table(alone).try_into::<T>() {
                return Err((Some(key.clone()), e.message().trim_end().to_string()));
            }
        }
    }
    Err((None, message))
}
