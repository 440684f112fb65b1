//! Tenants and their API tokens.

use std::fmt;

use sha2::{Digest, Sha256};

use super::FieldError;

/// A tenant's id: lowercase letters, digits, `_` and `-`, starting with a
/// letter or digit, at most 64 bytes. The database checks the same rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(String);

impl TenantId {
    pub fn parse(raw: &str) -> Result<Self, FieldError> {
        let valid = !raw.is_empty()
            && raw.len() <= 64
            && raw
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
            && !raw.starts_with(['_', '-']);
        if valid {
            Ok(Self(raw.to_string()))
        } else {
            Err(FieldError::new(
                "tenant_id",
                "must be 1-64 of a-z, 0-9, '_' or '-', starting with a letter or digit",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a token lets its holder do. Ordered: each scope includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Scope {
    Read,
    Write,
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "read" => Some(Scope::Read),
            "write" => Some(Scope::Write),
            "admin" => Some(Scope::Admin),
            _ => None,
        }
    }
}

const TOKEN_PREFIX: &str = "memd_";

/// A bearer token in clear. Only ever shown once, when created; the database
/// keeps its SHA-256 ([`ApiToken::hash`]).
pub struct ApiToken(String);

impl ApiToken {
    /// 256 random bits, hex-encoded behind a recognisable prefix.
    pub fn generate() -> Self {
        let bytes: [u8; 32] = rand::random();
        Self(format!("{TOKEN_PREFIX}{}", hex::encode(bytes)))
    }

    /// Accepts what a client sent, if it has the shape of a token.
    pub fn parse(raw: &str) -> Option<Self> {
        let hex_part = raw.strip_prefix(TOKEN_PREFIX)?;
        (hex_part.len() == 64 && hex_part.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Self(raw.to_string()))
    }

    pub fn hash(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_ids_follow_the_documented_rule() {
        for ok in ["acme", "a", "team-7_x", &"a".repeat(64)] {
            assert!(TenantId::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Acme", "-x", "_x", "a b", "a/b", &"a".repeat(65), "é"] {
            assert!(TenantId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn generated_tokens_parse_and_hash_stably() {
        let token = ApiToken::generate();
        let parsed = ApiToken::parse(token.expose()).expect("own token parses");
        assert_eq!(parsed.hash(), token.hash());
        assert_ne!(ApiToken::generate().hash(), token.hash());
        assert!(ApiToken::parse("memd_xyz").is_none());
        assert!(ApiToken::parse(&token.expose().replace("memd_", "mem_")).is_none());
        assert!(!format!("{token:?}").contains(&token.expose()[5..]));
    }
}
