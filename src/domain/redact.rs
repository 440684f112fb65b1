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
/// Patterns whose matches need a second look (a checksum, a shape the
/// regex cannot say) have a check in [`confirms`].
const BUILTIN_PATTERNS: &[(&str, &str)] = &[
    (
        "private_key",
        r"(?s)-----BEGIN[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----.*?(-----END[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\z)",
    ),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",
    ),
    // `scheme://user:password@`, the user possibly empty (`redis://:pw@`).
    (
        "url_credentials",
        r"(?i)\b[a-z][a-z0-9+.-]*://[^/\s:@]*:(?P<secret>[^@\s/]+)@",
    ),
    // HTTP basic credentials (base64 of `user:password`), in a header.
    (
        "basic_auth",
        r"(?i)\bauthorization\s*:\s*basic\s+(?P<secret>[A-Za-z0-9+/]{4,}=*)",
    ),
    // The MySQL clients' password glued to its flag: `mysql -pS3cret`.
    (
        "mysql_password",
        r"(?i)\bmysql(?:dump|admin|sh)?\b[^\n]*?\s-p(?P<secret>[^\s]+)",
    ),
    (
        "bearer",
        r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)",
    ),
    ("api_key", r"\bsk-[A-Za-z0-9_-]{16,}"),
    // memd's own tokens: an agent that prints its environment must not
    // hand its token to every reader of the tenant.
    ("memd_token", r"\bmemd_[0-9a-f]{64}\b"),
    ("stripe_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}"),
    ("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    (
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
    ),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("docker_token", r"\bdckr_pat_[A-Za-z0-9_-]{20,}"),
    ("gitlab_token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    // 40 characters of an AWS secret access key, on their own (checked:
    // upper and lower case letters and digits, not a hex digest).
    (
        "aws_secret_key",
        r"(?:^|[^A-Za-z0-9/+=])(?P<secret>[A-Za-z0-9/+]{40})(?:$|[^A-Za-z0-9/+=])",
    ),
    // A payment card number, 13-19 digits in groups (checked: Luhn, and a
    // card network's first digit).
    ("card_number", r"\b(?P<secret>[2-6](?:[ -]?[0-9]){12,18})\b"),
    // A US social security number, dashed (checked: no 000, 666 or 9xx
    // area, no 00 group, no 0000 serial).
    ("us_ssn", r"\b(?P<secret>[0-9]{3}-[0-9]{2}-[0-9]{4})\b"),
    (
        "assignment",
        r#"(?i)\b(?:password|passwd|pwd|pass|secret|client_secret|secret_key|token|access_token|refresh_token|auth_token|api[_-]?key|apikey|aws_secret_access_key|private_key)["']?\s*[:=]\s*(?P<secret>"[^"\n]*"|'[^'\n]*'|[^\s,;&"'}\]]+)"#,
    ),
    // Environment and config lines, the form tool output has: a name that
    // ends in (or is) a secret's word, whatever comes before it
    // (`DB_PASSWORD=`, `GITHUB_TOKEN=`, `OPENAI_API_KEY=`, `AccountKey=`,
    // `credentials:`); the value goes. The name must end in the word (or
    // a number after it: `TOKEN_2`), so `tokenizer:` and `token_est:` are
    // not secrets' names.
    (
        "env_secret",
        r#"(?i)\b[A-Za-z0-9_]*(?:password|passwd|secret|token|api[_-]?key|apikey|access[_-]?key|account[_-]?key|private[_-]?key|credentials?)(?:_?[0-9]+)?["']?\s*[:=]\s*(?P<secret>"[^"\n]*"|'[^'\n]*'|[^\s,;&"'}\]]+)"#,
    ),
    // A secret given as a command-line flag: `--password X`, `--token=X`.
    (
        "flag_secret",
        r"(?i)(?:^|\s)--?(?:password|passwd|pass|token|secret|api-key|apikey|access-key|secret-key)(?:=|\s+)(?P<secret>[^\s-][^\s]*)",
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

/// Whether a match of the built-in pattern `name` is the secret it looks
/// like: what a regular expression cannot say.
fn confirms(name: &str, candidate: &str) -> bool {
    // Already redacted by an earlier pattern (`TOKEN=` is also `token=`).
    if candidate.starts_with("[REDACTED:") {
        return false;
    }
    match name {
        "aws_secret_key" => {
            let has = |class: fn(&char) -> bool| candidate.chars().any(|c| class(&c));
            has(char::is_ascii_uppercase)
                && has(char::is_ascii_lowercase)
                && has(char::is_ascii_digit)
        }
        "card_number" => {
            let digits: Vec<u32> = candidate.chars().filter_map(|c| c.to_digit(10)).collect();
            (13..=19).contains(&digits.len())
                && digits.iter().any(|d| *d != digits[0])
                && luhn(&digits)
        }
        "us_ssn" => {
            let (area, rest) = candidate.split_at(3);
            let (group, serial) = (&rest[1..3], &rest[4..]);
            area != "000"
                && area != "666"
                && !area.starts_with('9')
                && group != "00"
                && serial != "0000"
        }
        _ => true,
    }
}

/// The Luhn checksum every payment card number carries.
fn luhn(digits: &[u32]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(index, digit)| match (index % 2, digit * 2) {
            (1, doubled) if doubled > 9 => doubled - 9,
            (1, doubled) => doubled,
            _ => *digit,
        })
        .sum();
    sum.is_multiple_of(10)
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

    /// The default patterns, plus those of `path` when an operator gave one
    /// (`--redact-patterns`).
    pub fn from_patterns_file(path: Option<&Path>) -> Result<Self, RedactConfigError> {
        match path {
            Some(path) => Self::with_patterns_file(path),
            None => Ok(Self::default()),
        }
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

    /// The names of its patterns, built-in first.
    pub fn pattern_names(&self) -> impl Iterator<Item = &str> {
        self.patterns.iter().map(|p| p.name.as_str())
    }

    /// The text with every secret replaced; `None` when nothing matched, so
    /// callers keep the original without copying it.
    pub fn redact(&self, text: &str) -> Option<String> {
        let matched = self.any.matches(text);
        if !matched.matched_any() {
            return None;
        }
        let mut current = text.to_string();
        let mut changed = false;
        for index in matched.iter() {
            let pattern = &self.patterns[index];
            if let Some(replaced) = replace_secrets(&pattern.regex, &pattern.name, &current) {
                current = replaced;
                changed = true;
            }
        }
        changed.then_some(current)
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

/// `text` with each confirmed match of `regex` replaced; `None` when no
/// match was a secret.
fn replace_secrets(regex: &Regex, name: &str, text: &str) -> Option<String> {
    let marker = format!("[REDACTED:{name}]");
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for caps in regex.captures_iter(text) {
        let whole = caps.get(0).expect("group 0 always exists");
        let target = caps.name("secret").unwrap_or(whole);
        if target.start() < last || !confirms(name, target.as_str()) {
            continue;
        }
        out.push_str(&text[last..target.start()]);
        out.push_str(&marker);
        last = target.end();
    }
    if last == 0 {
        return None;
    }
    out.push_str(&text[last..]);
    Some(out)
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
    fn secrets_in_env_form_and_other_vendors_tokens_are_caught() {
        let memd = format!("memd_{}", "ab12".repeat(16));
        let cases = [
            ("DB_PASSWORD=hunter2hunter2", "hunter2hunter2"),
            (
                "GITHUB_TOKEN=gho_notatokenbutsecret",
                "gho_notatokenbutsecret",
            ),
            ("OPENAI_API_KEY=abcdef123456", "abcdef123456"),
            ("AWS_SECRET=wobblewobble", "wobblewobble"),
            ("PGPASSWORD=correcthorse", "correcthorse"),
            ("export MEMD_TOKEN=plainvalue", "plainvalue"),
            ("access_key=AK123XYZ", "AK123XYZ"),
            ("psql --password s3cretpass", "s3cretpass"),
            ("run --token=abc123def", "abc123def"),
            (
                "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=Zm9vYmFyYmF6cXV4==;",
                "Zm9vYmFyYmF6cXV4",
            ),
            ("credentials: swordfish42", "swordfish42"),
            (
                "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
                "4eC39HqLyjWDarjtT1zdp7dc",
            ),
            (
                "rk_test_4eC39HqLyjWDarjtT1zdp7dc",
                "4eC39HqLyjWDarjtT1zdp7dc",
            ),
            (
                "key AIzaSyA-1234567890abcdefghijklmnopqrstu",
                "AIzaSyA-123456",
            ),
            ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "hf_AbCdEf"),
            (
                "aws wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY here",
                "wJalrXUtnFEMI",
            ),
            ("card 4111 1111 1111 1111 exp 12/29", "4111 1111 1111 1111"),
            ("card 5500-0000-0000-0004", "5500-0000-0000-0004"),
            ("ssn 123-45-6789 on file", "123-45-6789"),
            (&format!("token printed: {memd}"), memd.as_str()),
            ("REDIS_URL redis://:p4ssw0rd@redis.local:6379/0", "p4ssw0rd"),
            ("mysql -u root -pSuperSecret123 prod", "SuperSecret123"),
            (
                "Authorization: Basic dXNlcjpzdXBlcnNlY3JldA==",
                "dXNlcjpzdXBlcnNlY3JldA",
            ),
            ("npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "npm_AbCdEf"),
            ("dckr_pat_AbCdEfGhIjKlMnOpQrStUvWx", "dckr_pat_AbCd"),
            ("glpat-AbCdEfGhIjKlMnOpQrSt", "glpat-AbCd"),
        ];
        for (text, secret) in cases {
            let out = redacted(text);
            assert!(!out.contains(secret), "{text:?} became {out:?}");
            assert!(out.contains("[REDACTED:"), "{out:?}");
            assert!(!out.contains("]]"), "redacted twice: {out:?}");
        }
    }

    #[test]
    fn look_alikes_that_fail_their_check_are_left_alone() {
        for text in [
            // Luhn fails; a timestamp in ms; a git object id (hex, no caps).
            "order 4111 1111 1111 1112",
            "at 1733456789012 ms",
            "commit 3f786850e387550fdab836ed7e6dc881de23001b",
            // Not an SSN: area 000, 666 and 9xx.
            "ref 000-12-3456, 666-12-3456, 912-12-3456",
            // Words near a secret's name, no value assigned.
            "max_tokens: 2000",
            r#"{"token_est": 412, "token_used_est": 980}"#,
            "the tokenizer: byte pair",
            "we passed the secret santa list around",
            // Flags and phrases near the new patterns' words.
            "gcc -pthread -o app main.c && mkdir -p build",
            "a basic understanding of http://localhost:8080/path",
            "mysql -u root -p prod",
        ] {
            assert_eq!(Redactor::default().redact(text), None, "{text}");
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
