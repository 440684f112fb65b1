//! Secret redaction, applied to every string of an event (keys included)
//! before anything is written: memd never stores a recognised secret.
//!
//! Each pattern replaces its whole match with `[REDACTED:<name>]`, or, when the
//! regex has a capture group named `secret`, only that group, so that the
//! context stays readable (`password=[REDACTED:assignment]`).

use std::{fmt, path::Path};

use regex::{Regex, RegexSet};

/// Built-in patterns: (name, regex). Ordered from most to least specific, so a
/// private key block is redacted whole before the assignment rule sees it.
const BUILTIN_PATTERNS: &[(&str, &str)] = &[
    (
        "private_key",
        r"(?s)-----BEGIN[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----.*?(-----END[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\z)",
    ),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",
    ),
    (
        "url_credentials",
        r"(?i)\b[a-z][a-z0-9+.-]*://[^/\s:@]+:(?P<secret>[^@\s/]+)@",
    ),
    (
        "bearer",
        r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)",
    ),
    ("api_key", r"\bsk-[A-Za-z0-9_-]{16,}"),
    ("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    (
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
    ),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    (
        "assignment",
        r#"(?i)\b(?:password|passwd|pwd|pass|secret|client_secret|secret_key|token|access_token|refresh_token|auth_token|api[_-]?key|apikey|aws_secret_access_key|private_key)["']?\s*[:=]\s*(?P<secret>"[^"\n]*"|'[^'\n]*'|[^\s,;&"'}\]]+)"#,
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum RedactConfigError {
    #[error("cannot read redaction patterns from {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: expected `NAME REGEX`")]
    Syntax { path: String, line: usize },
    #[error("{path}:{line}: invalid regex: {source}")]
    Regex {
        path: String,
        line: usize,
        source: regex::Error,
    },
}

struct Pattern {
    name: String,
    regex: Regex,
}

/// The compiled patterns. Cheap to share behind an `Arc`.
pub struct Redactor {
    patterns: Vec<Pattern>,
    /// One pass to learn whether any pattern matches: most strings have no
    /// secret, and then they are not scanned once per pattern.
    any: RegexSet,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.patterns.iter().map(|p| p.name.as_str()).collect();
        f.debug_struct("Redactor")
            .field("patterns", &names)
            .finish()
    }
}

impl Default for Redactor {
    fn default() -> Self {
        Self::with_extra(Vec::new())
    }
}

impl Redactor {
    fn with_extra(extra: Vec<Pattern>) -> Self {
        let mut patterns: Vec<Pattern> = BUILTIN_PATTERNS
            .iter()
            .map(|(name, re)| Pattern {
                name: (*name).to_string(),
                regex: Regex::new(re).expect("built-in redaction pattern compiles"),
            })
            .collect();
        patterns.extend(extra);
        let any = RegexSet::new(patterns.iter().map(|p| p.regex.as_str()))
            .expect("patterns compiled one by one compile as a set");
        Self { patterns, any }
    }

    /// The built-in patterns plus those in `path`: one per line, `NAME REGEX`;
    /// blank lines and lines starting with `#` are ignored.
    pub fn with_patterns_file(path: &Path) -> Result<Self, RedactConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| RedactConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        let mut extra = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, regex) =
                line.split_once(char::is_whitespace)
                    .ok_or(RedactConfigError::Syntax {
                        path: shown.clone(),
                        line: index + 1,
                    })?;
            let regex = Regex::new(regex.trim()).map_err(|source| RedactConfigError::Regex {
                path: shown.clone(),
                line: index + 1,
                source,
            })?;
            extra.push(Pattern {
                name: name.to_string(),
                regex,
            });
        }
        Ok(Self::with_extra(extra))
    }

    /// The text with every secret replaced; `None` when nothing matched, so
    /// callers keep the original without copying it.
    pub fn redact(&self, text: &str) -> Option<String> {
        let matched = self.any.matches(text);
        if !matched.matched_any() {
            return None;
        }
        let mut current = text.to_string();
        for index in matched.iter() {
            let pattern = &self.patterns[index];
            current = replace_secrets(&pattern.regex, &pattern.name, &current);
        }
        Some(current)
    }

    /// Redacts in place; returns whether anything changed.
    pub fn redact_in_place(&self, text: &mut String) -> bool {
        match self.redact(text) {
            Some(redacted) => {
                *text = redacted;
                true
            }
            None => false,
        }
    }

    /// Redacts every string of a JSON value, object keys included; returns
    /// whether anything was redacted.
    pub fn redact_json(&self, value: &mut serde_json::Value) -> bool {
        use serde_json::Value;
        match value {
            Value::String(s) => self.redact_in_place(s),
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |found, v| self.redact_json(v) | found),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                let mut found = false;
                for (mut key, mut v) in entries {
                    found |= self.redact_in_place(&mut key);
                    found |= self.redact_json(&mut v);
                    map.insert(key, v);
                }
                found
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }
}

fn replace_secrets(regex: &Regex, name: &str, text: &str) -> String {
    let marker = format!("[REDACTED:{name}]");
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for caps in regex.captures_iter(text) {
        let whole = caps.get(0).expect("group 0 always exists");
        let target = caps.name("secret").unwrap_or(whole);
        if target.start() < last {
            continue;
        }
        out.push_str(&text[last..target.start()]);
        out.push_str(&marker);
        last = target.end();
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacted(text: &str) -> String {
        Redactor::default()
            .redact(text)
            .unwrap_or_else(|| text.to_string())
    }

    #[test]
    fn each_builtin_pattern_catches_its_secret() {
        let cases = [
            (
                "key sk-proj-abcdefghijklmnop1234 here",
                "sk-proj-abcdefghijklmnop1234",
            ),
            ("AKIAIOSFODNN7EXAMPLE is aws", "AKIAIOSFODNN7EXAMPLE"),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
                "MIIEowIBAAKCAQEA",
            ),
            ("db password=hunter2 ok", "hunter2"),
            (r#"{"api_key": "abc123xyz"}"#, "abc123xyz"),
            ("TOKEN: s3cr3tvalue", "s3cr3tvalue"),
            ("Authorization: Bearer abcdef0123456789", "abcdef0123456789"),
            (
                "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl end",
                "eyJzdWIiOiIxIn0",
            ),
            ("postgres://app:pa55word@db:5432/x", "pa55word"),
            ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghij"),
            ("xoxb-1234567890-abcdefghij", "xoxb-1234567890"),
        ];
        for (text, secret) in cases {
            let out = redacted(text);
            assert!(!out.contains(secret), "{text:?} became {out:?}");
            assert!(out.contains("[REDACTED:"), "{out:?}");
        }
    }

    #[test]
    fn context_around_a_secret_is_kept() {
        assert_eq!(
            redacted("password=hunter2 ok"),
            "password=[REDACTED:assignment] ok"
        );
        assert_eq!(
            redacted("Authorization: Bearer abcdef0123456789"),
            "Authorization: Bearer [REDACTED:bearer]"
        );
    }

    #[test]
    fn an_unterminated_private_key_is_redacted_to_the_end() {
        let out = redacted("start -----BEGIN PRIVATE KEY-----\nAAAAsecretbody");
        assert_eq!(out, "start [REDACTED:private_key]");
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for text in [
            "what is this project for?",
            "the skeleton key opens it",
            "tokens per second",
        ] {
            assert_eq!(Redactor::default().redact(text), None, "{text}");
        }
    }

    #[test]
    fn json_keys_and_nested_values_are_redacted() {
        let mut value = serde_json::json!({
            "sk-abcdefghijklmnopqrstu": ["x", {"deep": "password=hunter2"}],
        });
        Redactor::default().redact_json(&mut value);
        let text = value.to_string();
        assert!(!text.contains("sk-abcdefghijklmnopqrstu"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[test]
    fn extra_patterns_come_from_a_file() {
        let dir = std::env::temp_dir().join(crate::domain::new_id("memd-redact"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("patterns");
        std::fs::write(&path, "# internal ids\nemployee_id EMP-[0-9]{6}\n").unwrap();
        let redactor = Redactor::with_patterns_file(&path).unwrap();
        assert_eq!(
            redactor.redact("badge EMP-123456").as_deref(),
            Some("badge [REDACTED:employee_id]")
        );
        std::fs::write(&path, "broken (\n").unwrap();
        assert!(Redactor::with_patterns_file(&path).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
