//! Encryption at rest of `high` and `secret` memory (PRD §9.2).
//!
//! One 32-byte key, kept in a file outside the database (`memd key
//! generate`), seals the content of every high or secret event: in the log
//! (`events.content` becomes `{"sealed": …}`), in its artifact, and in every
//! projection row derived from it (chunk texts, decision and task texts,
//! views, handoffs, summaries). Metadata stays in the clear (ids, session,
//! channel, actor, kind, tags, times, a tool output's source name), so
//! privacy filters and the hash chain work without the key: the chain is
//! computed over what is stored, and `memd verify` needs no key.
//!
//! Sealing is deterministic (the nonce is a keyed hash of the tenant and the
//! plaintext, as in SIV): a rebuild writes the same bytes, so the drift
//! check compares projections without the key. The cost is that two equal
//! texts of one tenant seal to the same string; they are never compared
//! across tenants (the tenant is in the nonce and in the associated data).
//!
//! Full-text search of sealed chunks goes through a blind index: each
//! lexeme PostgreSQL derives from the chunk is replaced by a keyed hash of
//! it, and a question's lexemes are looked up both as themselves and
//! blinded. Equal words still show as equal tokens within a tenant (what a
//! blind index always reveals); the words themselves do not.
//!
//! The same key file also signs checkpoints of each tenant's log (an
//! Ed25519 key derived from it): one secret to keep outside the database.

use std::{borrow::Cow, fmt, path::Path, sync::Arc};

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use chacha20poly1305::{
    KeyInit, XChaCha20Poly1305, XNonce,
    aead::{Aead, Payload},
};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// How a sealed string starts. Appends refuse content strings that start
/// so, so whatever carries it was sealed by memd.
pub const SEALED_PREFIX: &str = "\u{1}sealed:";
/// The first line of a key file, before the key's 64 hex digits.
const FILE_PREFIX: &str = "memd-key-v1:";
const NONCE_LEN: usize = 24;
/// Prefix of blinded lexemes: PostgreSQL's parser never makes a lexeme
/// that starts with it.
const BLIND_PREFIX: char = '~';

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("sealed at rest with key {0}, and this process has no key (--key-file, MEMD_KEY_FILE)")]
    NoKey(String),
    #[error("sealed at rest with key {found}, not this process's key {ours}")]
    WrongKey { found: String, ours: String },
    #[error("a sealed value does not open: corrupt, or not sealed for this tenant")]
    Corrupt,
    /// Sealed under a data subject's key that was destroyed (`memd erase`):
    /// nothing can open it any more.
    #[error("sealed under an erased data subject's key {0}")]
    Erased(String),
}

/// Read paths report a value that does not open as a database error: the
/// stored row cannot be read as it must be.
impl From<SealError> for sqlx::Error {
    fn from(error: SealError) -> Self {
        sqlx::Error::Protocol(format!("sealed at rest: {error}"))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot read key file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("key file {0} is not a memd key (expected `{FILE_PREFIX}` and 64 hex digits)")]
    Format(String),
}

/// The key and what is derived from it.
struct DataKey {
    /// Names the key in sealed values (a hash of it, not the key).
    id: String,
    cipher: XChaCha20Poly1305,
    nonce_key: [u8; 32],
    blind_key: [u8; 32],
    /// Signs checkpoints.
    signing: ed25519_dalek::SigningKey,
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

impl DataKey {
    /// A data subject's key: the same derivations, named apart from any
    /// master key's.
    fn derive_subject(raw: &[u8; 32]) -> Self {
        let mut key = Self::derive(raw);
        key.id = format!("{SUBJECT_ID_PREFIX}{}", key.id);
        key
    }

    fn derive(master: &[u8; 32]) -> Self {
        let encryption = hmac(master, &[b"memd/seal/encryption"]);
        Self {
            id: hex::encode(&hmac(master, &[b"memd/seal/id"])[..8]),
            cipher: XChaCha20Poly1305::new(&encryption.into()),
            nonce_key: hmac(master, &[b"memd/seal/nonce"]),
            blind_key: hmac(master, &[b"memd/seal/blind"]),
            signing: ed25519_dalek::SigningKey::from_bytes(&hmac(
                master,
                &[b"memd/checkpoint/ed25519"],
            )),
        }
    }
}

/// The data key of this process, if it has one, and the keys of the data
/// subjects a reader has loaded ([`Keyring::with_subjects`]). Cheap to
/// clone.
#[derive(Clone, Default)]
pub struct Keyring {
    master: Option<Arc<DataKey>>,
    /// Data subjects' keys by id: what the log's content of a subject's
    /// events is sealed under (crypto-shredding: erasing a subject destroys
    /// its key).
    subjects: Option<Arc<std::collections::HashMap<String, Arc<DataKey>>>>,
}

/// How a data subject's key id starts: a sealed value under an id of this
/// form that no loaded key matches was sealed under an erased key.
const SUBJECT_ID_PREFIX: &str = "subject-";

/// What wraps a data subject's key under the master key names both, so a
/// wrapped key cannot be moved to another tenant or subject.
fn subject_aad(tenant: &str, subject: &str) -> Vec<u8> {
    format!("memd/subject-key/{tenant}\0{subject}").into_bytes()
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.key_id() {
            Some(id) => write!(f, "Keyring({id})"),
            None => f.write_str("Keyring(none)"),
        }
    }
}

impl Keyring {
    /// No key: nothing is sealed, and sealed values do not open.
    pub fn none() -> Self {
        Self::default()
    }

    pub fn from_bytes(master: &[u8; 32]) -> Self {
        Self {
            master: Some(Arc::new(DataKey::derive(master))),
            subjects: None,
        }
    }

    /// A random key held only in memory: for a scratch database that is
    /// dropped with the process's run.
    pub fn ephemeral() -> Self {
        Self::from_bytes(&rand::random())
    }

    /// A new random key, as a key file's text.
    pub fn generate() -> String {
        let master: [u8; 32] = rand::random();
        format!("{FILE_PREFIX}{}\n", hex::encode(master))
    }

    /// Reads a key file written by [`Keyring::generate`].
    pub fn load(path: &Path) -> Result<Self, KeyFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyFileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).ok_or_else(|| KeyFileError::Format(path.display().to_string()))
    }

    fn parse(text: &str) -> Option<Self> {
        let digits = text.trim().strip_prefix(FILE_PREFIX)?;
        let bytes: [u8; 32] = hex::decode(digits).ok()?.try_into().ok()?;
        Some(Self::from_bytes(&bytes))
    }

    /// The key's public name, if there is a key.
    pub fn key_id(&self) -> Option<&str> {
        self.master.as_deref().map(|key| key.id.as_str())
    }

    pub fn is_on(&self) -> bool {
        self.master.is_some()
    }

    /// What seals `tenant`'s content, if there is a key. Which content is
    /// sealed is the caller's to say: a sealed sensitivity
    /// ([`crate::event::Sensitivity::is_sealed`]) or a data subject's.
    pub fn sealer(&self, tenant: &str) -> Option<Sealer> {
        let key = self.master.as_ref()?;
        Some(Sealer {
            key: key.clone(),
            tenant: tenant.into(),
        })
    }

    /// `text` opened if it is sealed, as is otherwise.
    pub fn open<'t>(&self, tenant: &str, text: &'t str) -> Result<Cow<'t, str>, SealError> {
        if !text.starts_with(SEALED_PREFIX) {
            return Ok(Cow::Borrowed(text));
        }
        String::from_utf8(self.open_raw(tenant, text)?)
            .map(Cow::Owned)
            .map_err(|_| SealError::Corrupt)
    }

    /// Bytes sealed by [`Sealer::seal_bytes`] opened, others as they are
    /// (an artifact).
    pub fn open_bytes<'b>(
        &self,
        tenant: &str,
        bytes: &'b [u8],
    ) -> Result<Cow<'b, [u8]>, SealError> {
        if !bytes.starts_with(SEALED_PREFIX.as_bytes()) {
            return Ok(Cow::Borrowed(bytes));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| SealError::Corrupt)?;
        self.open_raw(tenant, text).map(Cow::Owned)
    }

    fn open_raw(&self, tenant: &str, text: &str) -> Result<Vec<u8>, SealError> {
        let sealed = text.strip_prefix(SEALED_PREFIX).ok_or(SealError::Corrupt)?;
        let (id, data) = sealed.split_once(':').ok_or(SealError::Corrupt)?;
        let key = self.key_named(id)?;
        let data = URL_SAFE_NO_PAD
            .decode(data)
            .map_err(|_| SealError::Corrupt)?;
        if data.len() < NONCE_LEN {
            return Err(SealError::Corrupt);
        }
        let (nonce, ciphertext) = data.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().expect("split at NONCE_LEN");
        let plain = key
            .cipher
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad: tenant.as_bytes(),
                },
            )
            .map_err(|_| SealError::Corrupt)?;
        Ok(plain)
    }

    /// Opens a text column in place.
    pub fn open_in_place(&self, tenant: &str, text: &mut String) -> Result<(), SealError> {
        if let Cow::Owned(plain) = self.open(tenant, text)? {
            *text = plain;
        }
        Ok(())
    }

    /// Opens every element of a text-array column in place.
    pub fn open_all(&self, tenant: &str, texts: &mut [String]) -> Result<(), SealError> {
        texts
            .iter_mut()
            .try_for_each(|text| self.open_in_place(tenant, text))
    }

    /// Opens a JSON column sealed by [`Sealer::seal_json`].
    pub fn open_json(&self, tenant: &str, value: &mut Value) -> Result<(), SealError> {
        if let Value::String(text) = value
            && text.starts_with(SEALED_PREFIX)
        {
            let plain = self.open(tenant, text)?;
            *value = serde_json::from_str(&plain).map_err(|_| SealError::Corrupt)?;
        }
        Ok(())
    }

    /// Opens an event's content sealed by [`Sealer::seal_content`]; any
    /// other content is left as it is. Returns whether it was sealed.
    pub fn open_content(&self, tenant: &str, content: &mut Value) -> Result<bool, SealError> {
        match content.get("sealed") {
            Some(Value::String(text)) if text.starts_with(SEALED_PREFIX) => {
                let plain = self.open(tenant, text)?;
                *content = serde_json::from_str(&plain).map_err(|_| SealError::Corrupt)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// An event's content opened as [`Keyring::open_content`] opens it, but
    /// for an event of a data subject (`has_subject`) whose key was
    /// destroyed: its content becomes `{}` and the answer [`Opened::Erased`].
    pub fn open_event_content(
        &self,
        tenant: &str,
        content: &mut Value,
        has_subject: bool,
    ) -> Result<Opened, SealError> {
        match self.open_content(tenant, content) {
            Ok(true) => Ok(Opened::Sealed),
            Ok(false) => Ok(Opened::Clear),
            Err(SealError::Erased(_)) if has_subject => {
                *content = Value::Object(serde_json::Map::new());
                Ok(Opened::Erased)
            }
            Err(other) => Err(other),
        }
    }

    /// The checkpoint-signing public key, hex, if there is a key.
    pub fn public_key(&self) -> Option<String> {
        self.master
            .as_ref()
            .map(|key| hex::encode(key.signing.verifying_key().as_bytes()))
    }

    /// `message` signed with the checkpoint key (hex), if there is a key.
    pub fn sign(&self, message: &[u8]) -> Option<String> {
        use ed25519_dalek::Signer;
        self.master
            .as_ref()
            .map(|key| hex::encode(key.signing.sign(message).to_bytes()))
    }

    /// A question's lexeme as the blind index of sealed chunks holds it.
    pub fn blind(&self, lexeme: &str) -> Option<String> {
        self.master.as_ref().map(|key| blind(key, lexeme))
    }

    /// The key a sealed value names: this process's, or a loaded data
    /// subject's.
    fn key_named(&self, id: &str) -> Result<&Arc<DataKey>, SealError> {
        if let Some(key) = self.subjects.as_ref().and_then(|keys| keys.get(id)) {
            return Ok(key);
        }
        if id.starts_with(SUBJECT_ID_PREFIX) {
            return Err(SealError::Erased(id.into()));
        }
        let key = self
            .master
            .as_ref()
            .ok_or_else(|| SealError::NoKey(id.into()))?;
        if id != key.id {
            return Err(SealError::WrongKey {
                found: id.into(),
                ours: key.id.clone(),
            });
        }
        Ok(key)
    }

    /// A new data subject key, wrapped (sealed) under the master key for
    /// `tenant` and `subject`: what the `subject_keys` table holds. `None`
    /// without a master key.
    pub fn new_subject_key(&self, tenant: &str, subject: &str) -> Option<Vec<u8>> {
        let master = self.master.as_ref()?;
        let raw: [u8; 32] = rand::random();
        let nonce: [u8; NONCE_LEN] = rand::random();
        let mut wrapped = nonce.to_vec();
        wrapped.extend(
            master
                .cipher
                .encrypt(
                    &XNonce::from(nonce),
                    Payload {
                        msg: &raw,
                        aad: &subject_aad(tenant, subject),
                    },
                )
                .expect("a 32-byte key seals"),
        );
        Some(wrapped)
    }

    /// This keyring with the keys of data subjects added: `(subject,
    /// wrapped)` as [`Keyring::new_subject_key`] made them. A wrapped key
    /// that does not open under the master key is an error.
    pub fn with_subjects<'a>(
        &self,
        tenant: &str,
        wrapped: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<Self, SealError> {
        let mut keys = self.subjects.as_deref().cloned().unwrap_or_default();
        for (subject, wrapped) in wrapped {
            let key = self.unwrap_subject(tenant, subject, wrapped)?;
            keys.insert(key.id.clone(), Arc::new(key));
        }
        Ok(Self {
            master: self.master.clone(),
            subjects: Some(Arc::new(keys)),
        })
    }

    /// What seals a data subject's content in the log: its key, unwrapped
    /// from `wrapped`.
    pub fn subject_sealer(
        &self,
        tenant: &str,
        subject: &str,
        wrapped: &[u8],
    ) -> Result<Sealer, SealError> {
        Ok(Sealer {
            key: Arc::new(self.unwrap_subject(tenant, subject, wrapped)?),
            tenant: tenant.into(),
        })
    }

    fn unwrap_subject(
        &self,
        tenant: &str,
        subject: &str,
        wrapped: &[u8],
    ) -> Result<DataKey, SealError> {
        let master = self
            .master
            .as_ref()
            .ok_or_else(|| SealError::NoKey(format!("{SUBJECT_ID_PREFIX}{subject}")))?;
        if wrapped.len() < NONCE_LEN {
            return Err(SealError::Corrupt);
        }
        let (nonce, sealed) = wrapped.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().expect("split at NONCE_LEN");
        let raw: [u8; 32] = master
            .cipher
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: sealed,
                    aad: &subject_aad(tenant, subject),
                },
            )
            .map_err(|_| SealError::Corrupt)?
            .try_into()
            .map_err(|_| SealError::Corrupt)?;
        Ok(DataKey::derive_subject(&raw))
    }
}

/// What [`Keyring::open_event_content`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// Stored in the clear.
    Clear,
    /// Sealed at rest, and now opened.
    Sealed,
    /// Sealed under an erased data subject's key: unreadable for good.
    Erased,
}

/// Whether `signature` (hex) is `public_key`'s (hex) over `message`.
pub fn signature_holds(public_key: &str, message: &[u8], signature: &str) -> bool {
    let key: Option<[u8; 32]> = hex::decode(public_key).ok().and_then(|b| b.try_into().ok());
    let signature: Option<[u8; 64]> = hex::decode(signature).ok().and_then(|b| b.try_into().ok());
    let (Some(key), Some(signature)) = (key, signature) else {
        return false;
    };
    ed25519_dalek::VerifyingKey::from_bytes(&key).is_ok_and(|key| {
        key.verify_strict(message, &ed25519_dalek::Signature::from_bytes(&signature))
            .is_ok()
    })
}

fn blind(key: &DataKey, lexeme: &str) -> String {
    let mac = hmac(&key.blind_key, &[b"lexeme\0", lexeme.as_bytes()]);
    format!("{BLIND_PREFIX}{}", hex::encode(&mac[..10]))
}

/// Seals one tenant's content of one sensitivity: what projectors use for
/// the rows they derive from a sealed event.
#[derive(Clone)]
pub struct Sealer {
    key: Arc<DataKey>,
    tenant: Arc<str>,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sealer({}, {})", self.key.id, self.tenant)
    }
}

impl Sealer {
    pub fn seal(&self, plaintext: &str) -> String {
        self.seal_bytes(plaintext.as_bytes())
    }

    /// Any bytes (an artifact's) as a sealed string.
    pub fn seal_bytes(&self, plaintext: &[u8]) -> String {
        let tag = hmac(
            &self.key.nonce_key,
            &[self.tenant.as_bytes(), b"\0", plaintext],
        );
        let nonce: [u8; NONCE_LEN] = tag[..NONCE_LEN].try_into().expect("a tag is 32 bytes");
        let ciphertext = self
            .key
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad: self.tenant.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 seals any length memd stores");
        let mut data = Vec::with_capacity(NONCE_LEN + ciphertext.len());
        data.extend_from_slice(&nonce);
        data.extend_from_slice(&ciphertext);
        format!(
            "{SEALED_PREFIX}{}:{}",
            self.key.id,
            URL_SAFE_NO_PAD.encode(data)
        )
    }

    /// A JSON value as a sealed JSON string.
    pub fn seal_json(&self, value: &Value) -> Value {
        Value::String(self.seal(&value.to_string()))
    }

    /// An event's content as stored: `{"sealed": …}`, plus the artifact's
    /// digest in the clear when there is one, so `memd verify` checks the
    /// artifact without the key.
    pub fn seal_content(&self, content: &Value) -> Value {
        let mut envelope = serde_json::Map::new();
        envelope.insert(
            "sealed".into(),
            Value::String(self.seal(&content.to_string())),
        );
        if let Some(digest) = content.get("artifact_sha256") {
            envelope.insert("artifact_sha256".into(), digest.clone());
        }
        Value::Object(envelope)
    }

    /// A lexeme of a sealed chunk, as its blind index holds it.
    pub fn blind(&self, lexeme: &str) -> String {
        blind(&self.key, lexeme)
    }

    /// A keyed digest in place of a plain one (a plain SHA-256 of a short
    /// text can be found by guessing the text).
    pub fn keyed_digest(&self, digest: &[u8]) -> Vec<u8> {
        hmac(
            &self.key.blind_key,
            &[b"digest\0", self.tenant.as_bytes(), b"\0", digest],
        )
        .to_vec()
    }

    /// A keyed word hash in place of a plain one, for near-duplicate sets.
    pub fn keyed_word(&self, word: u64) -> u64 {
        let mac = hmac(&self.key.blind_key, &[b"word\0", &word.to_le_bytes()]);
        u64::from_le_bytes(mac[..8].try_into().expect("8 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn keyring(byte: u8) -> Keyring {
        Keyring::from_bytes(&[byte; 32])
    }

    #[test]
    fn sealed_text_opens_for_its_tenant_only() {
        let keys = keyring(7);
        let sealer = keys.sealer("acme").expect("high is sealed");
        let sealed = sealer.seal("the vault code is 4711");
        assert!(sealed.starts_with(SEALED_PREFIX));
        assert!(!sealed.contains("4711"));
        assert_eq!(
            keys.open("acme", &sealed).unwrap(),
            "the vault code is 4711"
        );
        assert_eq!(keys.open("globex", &sealed), Err(SealError::Corrupt));
    }

    #[test]
    fn sealing_is_deterministic_so_rebuilds_write_the_same_bytes() {
        let sealer = keyring(7).sealer("acme").unwrap();
        assert_eq!(sealer.seal("same words"), sealer.seal("same words"));
        assert_ne!(sealer.seal("same words"), sealer.seal("other words"));
        let other_tenant = keyring(7).sealer("globex").unwrap();
        assert_ne!(sealer.seal("same words"), other_tenant.seal("same words"));
    }

    #[test]
    fn content_is_sealed_only_with_a_key() {
        let keys = keyring(1);
        assert!(keys.sealer("t").is_some());
        assert!(Keyring::none().sealer("t").is_none());
    }

    #[test]
    fn a_tampered_or_foreign_value_is_refused_not_misread() {
        let sealed = keyring(7).sealer("t").unwrap().seal("hello");
        let mut tampered = sealed.clone().into_bytes();
        let last = tampered.len() - 2;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        assert_eq!(keyring(7).open("t", &tampered), Err(SealError::Corrupt));
        assert!(matches!(
            keyring(8).open("t", &sealed),
            Err(SealError::WrongKey { .. })
        ));
        assert!(matches!(
            Keyring::none().open("t", &sealed),
            Err(SealError::NoKey(_))
        ));
        assert_eq!(Keyring::none().open("t", "plain").unwrap(), "plain");
    }

    #[test]
    fn content_and_json_round_trip_with_the_artifact_digest_in_the_clear() {
        let keys = keyring(3);
        let sealer = keys.sealer("t").unwrap();
        let content = json!({"text": "deploy key rotated", "artifact_sha256": "ab12"});
        let mut stored = sealer.seal_content(&content);
        assert_eq!(stored["artifact_sha256"], "ab12");
        assert!(!stored.to_string().contains("deploy"));
        assert!(keys.open_content("t", &mut stored).unwrap());
        assert_eq!(stored, content);

        let mut value = sealer.seal_json(&json!({"budget": 65000}));
        keys.open_json("t", &mut value).unwrap();
        assert_eq!(value, json!({"budget": 65000}));
        let artifact = sealer.seal_bytes(&[0xff, 0, 1]);
        assert_eq!(
            keys.open_bytes("t", artifact.as_bytes()).unwrap().as_ref(),
            &[0xff, 0, 1]
        );
        assert_eq!(keys.open_bytes("t", b"plain").unwrap().as_ref(), b"plain");
        let mut plain = json!({"text": "hi"});
        assert!(!keys.open_content("t", &mut plain).unwrap());
    }

    #[test]
    fn blinded_lexemes_match_between_chunks_and_questions_and_hide_the_word() {
        let keys = keyring(5);
        let sealer = keys.sealer("t").unwrap();
        assert_eq!(sealer.blind("vault"), keys.blind("vault").unwrap());
        assert_ne!(sealer.blind("vault"), sealer.blind("vaults"));
        assert!(!sealer.blind("vault").contains("vault"));
        assert_ne!(keyring(6).blind("vault"), keys.blind("vault"));
    }

    #[test]
    fn checkpoint_signatures_hold_for_their_key_and_message_only() {
        let keys = keyring(9);
        let public = keys.public_key().unwrap();
        let signature = keys.sign(b"acme 42").unwrap();
        assert!(signature_holds(&public, b"acme 42", &signature));
        assert!(!signature_holds(&public, b"acme 43", &signature));
        assert!(!signature_holds(
            &keyring(10).public_key().unwrap(),
            b"acme 42",
            &signature
        ));
        assert!(!signature_holds(&public, b"acme 42", "00"));
        assert!(Keyring::none().sign(b"x").is_none());
    }

    #[test]
    fn key_files_round_trip_and_bad_ones_are_named() {
        let text = Keyring::generate();
        let keys = Keyring::parse(&text).expect("a generated key parses");
        assert_eq!(keys.key_id().unwrap().len(), 16);
        assert!(Keyring::parse("memd-key-v1:abcd").is_none());
        assert!(Keyring::parse("not a key").is_none());
    }

    #[test]
    fn a_subjects_content_opens_only_while_its_key_is_loaded() {
        let keys = keyring(7);
        let wrapped = keys.new_subject_key("acme", "alice").expect("a master key");
        let sealer = keys.subject_sealer("acme", "alice", &wrapped).unwrap();
        let sealed = sealer.seal("Alice's address is 12 Rue Oberkampf");
        assert!(!sealed.contains("Oberkampf"));
        // With her key loaded it opens; the master key alone cannot.
        let loaded = keys
            .with_subjects("acme", [("alice", wrapped.as_slice())])
            .unwrap();
        assert_eq!(
            loaded.open("acme", &sealed).unwrap(),
            "Alice's address is 12 Rue Oberkampf"
        );
        assert!(matches!(
            keys.open("acme", &sealed),
            Err(SealError::Erased(_))
        ));
        // A wrapped key is bound to its tenant and subject, and to the
        // master key that wrapped it.
        assert_eq!(
            keys.with_subjects("acme", [("bob", wrapped.as_slice())])
                .err(),
            Some(SealError::Corrupt)
        );
        assert_eq!(
            keyring(8)
                .with_subjects("acme", [("alice", wrapped.as_slice())])
                .err(),
            Some(SealError::Corrupt)
        );
        // Two subjects' keys differ.
        let other = keys.new_subject_key("acme", "alice").unwrap();
        let other = keys.subject_sealer("acme", "alice", &other).unwrap();
        assert_ne!(other.seal("same text"), sealer.seal("same text"));
    }
}
