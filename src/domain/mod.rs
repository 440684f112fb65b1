//! Parsed, validated types. Nothing here does I/O: request bodies become these
//! types at the edge (`api/`), and everything past the edge trusts them.

pub mod event;
pub mod jsonb_text;
pub mod limits;
pub mod redact;
pub mod strict_json;
pub mod tenant;
pub mod tool_result;

/// A request field that failed validation, named by its JSON path
/// (`events[3].actor.type`) so clients can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Prefixes the field path, e.g. `channel` inside batch item 3 becomes `events[3].channel`.
    pub fn within(mut self, prefix: &str) -> Self {
        self.field = if self.field.is_empty() || self.field == "." {
            prefix.to_string()
        } else if self.field.starts_with('[') {
            format!("{prefix}{}", self.field)
        } else {
            format!("{prefix}.{}", self.field)
        };
        self
    }
}

/// A fresh id: `prefix` + `_` + a ULID (time-ordered, 80 random bits), e.g.
/// `evt_01J...`. The prefix tells what a ref points to.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", ulid::Ulid::generate())
}

/// Deserializes a struct from a JSON object only: serde's derive also
/// takes an array of the fields in order (`"filters": [null, null]`),
/// which no client means and the OpenAPI document does not allow. For
/// `#[serde(deserialize_with = "object")]` on a field; the fields inside
/// keep their paths in errors.
pub fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    struct Object<T>(std::marker::PhantomData<T>);
    impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Object<T> {
        type Value = T;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    deserializer.deserialize_map(Object(std::marker::PhantomData))
}

/// Deserializes a request (or part of one, under `prefix`) into `T`, naming
/// the failing field by its JSON path.
pub fn parse_json<'de, T: serde::Deserialize<'de>>(
    prefix: &str,
    value: impl serde::Deserializer<'de, Error = serde_json::Error>,
) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let message = err.into_inner().to_string();
        let mut parts: Vec<String> = Vec::new();
        if !prefix.is_empty() {
            parts.push(prefix.to_string());
        }
        if path != "." {
            parts.push(path);
        }
        // serde reports a missing field at its parent; take its name from
        // the message (`missing field `x``). An unknown field is already
        // the last element of the path.
        if let Some(name) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            parts.push(name.to_string());
        }
        FieldError::new(parts.join("."), message)
    })
}
