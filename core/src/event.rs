//! Events as projectors read them from the log.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgConnection;

use crate::{
    content::Content,
    seal::{Keyring, Opened, SealError, Sealer},
};

// The event model's enums, one type each for the wire (validated at the
// edge, described in the OpenAPI document and the MCP tools' schemas) and
// the projectors (which branch on them).
//
// `$text` is a `tt`, not a `literal`: a `literal` fragment reaches derive
// macros wrapped in an invisible group, and utoipa's reading of
// `#[serde(rename = ...)]` then misses it (the OpenAPI enum would say
// `Private`, not `private`). The OpenAPI test checks the values.
macro_rules! wire_enum {
    ($(#[$attr:meta])* $name:ident { $($(#[$vattr:meta])* $variant:ident => $text:tt),+ $(,)? }) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema, utoipa::ToSchema)]
        pub enum $name {
            $($(#[$vattr])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            pub fn parse(raw: &str) -> Option<Self> {
                match raw {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        // A TEXT column (its values held by a CHECK constraint), read and
        // bound as the enum itself.
        impl sqlx::Type<sqlx::Postgres> for $name {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::Type<sqlx::Postgres>>::type_info()
            }

            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <&str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }

        impl sqlx::postgres::PgHasArrayType for $name {
            fn array_type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::postgres::PgHasArrayType>::array_type_info()
            }
        }

        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $name {
            fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
                Self::parse(text)
                    .ok_or_else(|| format!("{text:?} is no {}", stringify!($name)).into())
            }
        }

        impl sqlx::Encode<'_, sqlx::Postgres> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::Postgres>>::encode(self.as_str(), buf)
            }
        }
    };
}

wire_enum!(
    /// Where a conversation happens; decides what memory may be loaded into it (PRD §9).
    Channel { Private => "private", Public => "public", Team => "team", Agent => "agent" }
);
wire_enum!(
    /// Who produced an event. `system` is memd's own operators (imports, admin).
    ActorType { Human => "human", Agent => "agent", Tool => "tool", System => "system" }
);
wire_enum!(
    /// What an event is (the `kind` column); decides the shape of
    /// `content`, and what each projector makes of it.
    Kind {
        Message => "message",
        ToolCall => "tool_call",
        ToolResult => "tool_result",
        Decision => "decision",
        TaskUpdate => "task_update",
        Summary => "summary",
        ViewUpdate => "view_update",
        Handoff => "handoff",
        Artifact => "artifact",
        /// Recorded by memd when a data subject is erased (`memd erase`);
        /// never sent by a client.
        Erasure => "erasure",
        /// Withdraws the earlier events its `refs` name, with a reason.
        Retraction => "retraction",
    }
);
wire_enum!(
    /// The kinds a client may append, as the OpenAPI document and the MCP
    /// tool's schema state them: every [`Kind`] but `erasure`, which only
    /// memd records (an append of one is refused, naming `kind`).
    AppendableKind {
        Message => "message",
        ToolCall => "tool_call",
        ToolResult => "tool_result",
        Decision => "decision",
        TaskUpdate => "task_update",
        Summary => "summary",
        ViewUpdate => "view_update",
        Handoff => "handoff",
        Artifact => "artifact",
        Retraction => "retraction",
    }
);
wire_enum!(
    /// How sensitive the content is. `secret` content is never stored.
    // Declared from least to most sensitive, which is how they compare.
    #[derive(Default, PartialOrd, Ord)]
    Sensitivity { #[default] None => "none", Low => "low", High => "high", Secret => "secret" }
);

impl Sensitivity {
    /// Content of this sensitivity is sealed at rest when a key is present.
    pub fn is_sealed(self) -> bool {
        matches!(self, Sensitivity::High | Sensitivity::Secret)
    }
}

impl Kind {
    /// Kinds that take turns in a session (a conversation's messages, an
    /// agent's tool calls and their results): a turn's neighbours are the
    /// turns just before and after it in its session.
    pub const TURNS: &'static [Kind] = &[Kind::Message, Kind::ToolCall, Kind::ToolResult];
}

/// One row of `events`, minus the hash chain.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredEvent {
    pub seq: i64,
    pub event_id: String,
    pub created_at: DateTime<Utc>,
    pub ts: DateTime<Utc>,
    pub session_id: String,
    pub channel: Channel,
    pub actor_type: ActorType,
    pub actor_id: String,
    /// The agent whose memory it is, if any.
    pub agent_id: Option<String>,
    /// The data subject whose key seals its content in the log, if any.
    #[sqlx(default)]
    pub subject_id: Option<String>,
    pub kind: Kind,
    pub sensitivity: Sensitivity,
    pub tags: Vec<String>,
    pub content: Value,
    pub refs: Vec<String>,
    pub artifact_id: Option<String>,
    /// Its chain hash (empty where a reader did not select it): the leaf
    /// of the tenant's Merkle tree.
    #[sqlx(default)]
    pub hash: Vec<u8>,
    /// Seals what projectors derive from this event, when its content is
    /// sealed at rest (high or secret, and this process has the key);
    /// `content` itself is always the opened plaintext.
    #[sqlx(skip)]
    pub sealer: Option<Sealer>,
    /// The key it was read with, for projectors that read back rows of
    /// earlier (perhaps sealed) events.
    #[sqlx(skip)]
    pub keyring: Keyring,
    /// Its data subject was erased: the content can never be opened again
    /// (it is `{}` here), and projections keep nothing of it.
    #[sqlx(skip)]
    pub erased: bool,
}

impl StoredEvent {
    /// A text a projection row keeps: sealed when the event is.
    pub fn protect(&self, text: String) -> String {
        match &self.sealer {
            Some(sealer) => sealer.seal(&text),
            None => text,
        }
    }

    /// [`Self::protect`] for each text of an array column.
    pub fn protect_all(&self, texts: &[&str]) -> Vec<String> {
        match &self.sealer {
            Some(sealer) => texts.iter().map(|text| sealer.seal(text)).collect(),
            None => texts.iter().map(|text| (*text).to_owned()).collect(),
        }
    }

    /// [`Self::protect`] for a JSON column.
    pub fn protect_json(&self, value: Value) -> Value {
        match &self.sealer {
            Some(sealer) => sealer.seal_json(&value),
            None => value,
        }
    }

    /// Its content, read as the shape of its kind.
    pub fn shape(&self) -> Content<'_> {
        Content::read(self.kind, &self.content)
    }
}

/// The columns of `events` a [`StoredEvent`] is read from.
const COLUMNS: &str = "seq, event_id, created_at, ts, session_id, channel, actor_type, actor_id,
                       agent_id, subject_id, kind, sensitivity, tags, content, refs, artifact_id,
                       hash";

/// Reads up to `limit` events of `tenant` with `after < seq <= until`, in seq
/// order, their sealed contents opened with `keyring`. A sealed event that
/// does not open is an error: projecting its envelope as if it were the
/// content would lose it silently.
pub async fn read_after(
    conn: &mut PgConnection,
    keyring: &Keyring,
    tenant: &str,
    after: i64,
    until: i64,
    limit: i64,
) -> Result<Vec<StoredEvent>, sqlx::Error> {
    let events: Vec<StoredEvent> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM public.events
          WHERE tenant_id = $1 AND seq > $2 AND seq <= $3
          ORDER BY seq
          LIMIT $4"
    )))
    .bind(tenant)
    .bind(after)
    .bind(until)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    opened(conn, keyring, tenant, events).await
}

/// The events of `tenant` named by `ids`, in seq order, opened as
/// [`read_after`] opens them: what a projection folds again when a
/// retraction withdraws one of the events it was folded from.
pub async fn read_ids(
    conn: &mut PgConnection,
    keyring: &Keyring,
    tenant: &str,
    ids: &[String],
) -> Result<Vec<StoredEvent>, sqlx::Error> {
    let events: Vec<StoredEvent> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM public.events
          WHERE tenant_id = $1 AND event_id = ANY ($2)
          ORDER BY seq"
    )))
    .bind(tenant)
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?;
    opened(conn, keyring, tenant, events).await
}

/// Up to `limit` events of `tenant` of `kind` below seq `before`, newest
/// first, opened as [`read_after`] opens them.
pub async fn read_kind_before(
    conn: &mut PgConnection,
    keyring: &Keyring,
    tenant: &str,
    kind: Kind,
    before: i64,
    limit: i64,
) -> Result<Vec<StoredEvent>, sqlx::Error> {
    let events: Vec<StoredEvent> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM public.events
          WHERE tenant_id = $1 AND kind = $2 AND seq < $3
          ORDER BY seq DESC
          LIMIT $4"
    )))
    .bind(tenant)
    .bind(kind)
    .bind(before)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    opened(conn, keyring, tenant, events).await
}

/// `events` with their contents opened (with their data subjects' keys).
async fn opened(
    conn: &mut PgConnection,
    keyring: &Keyring,
    tenant: &str,
    mut events: Vec<StoredEvent>,
) -> Result<Vec<StoredEvent>, sqlx::Error> {
    let keyring = subject_keyring(
        &mut *conn,
        keyring,
        tenant,
        events.iter().filter_map(|e| e.subject_id.as_deref()),
    )
    .await?;
    for event in &mut events {
        open(&keyring, tenant, event).map_err(|error| {
            sqlx::Error::Protocol(format!("event {} of {tenant}: {error}", event.event_id))
        })?;
    }
    Ok(events)
}

/// Opens `event`'s content and arms its sealer for the rows derived from it.
/// A data subject's event opens with its key (loaded into `keyring` by
/// [`subject_keyring`]), and what projections derive from it is sealed
/// (under the process's key) whatever its sensitivity; once the subject is
/// erased, the event is marked `erased` with `{}` for content.
pub fn open(keyring: &Keyring, tenant: &str, event: &mut StoredEvent) -> Result<(), SealError> {
    let opened =
        keyring.open_event_content(tenant, &mut event.content, event.subject_id.is_some())?;
    event.erased = opened == Opened::Erased;
    // Checked before the sealer is made: most events are not sealed, and
    // making one copies the tenant's name.
    event.sealer = if event.subject_id.is_some() || event.sensitivity.is_sealed() {
        keyring.sealer(tenant)
    } else {
        None
    };
    event.keyring = keyring.clone();
    Ok(())
}

/// `keyring` with the keys of `subjects` (data subjects of `tenant`), those
/// not erased: an erased subject's content then fails to open with
/// [`SealError::Erased`].
pub async fn subject_keyring<'a>(
    executor: impl sqlx::PgExecutor<'_>,
    keyring: &Keyring,
    tenant: &str,
    subjects: impl IntoIterator<Item = &'a str>,
) -> Result<Keyring, sqlx::Error> {
    let mut subjects: Vec<&str> = subjects.into_iter().collect();
    if subjects.is_empty() || !keyring.is_on() {
        return Ok(keyring.clone());
    }
    subjects.sort_unstable();
    subjects.dedup();
    let rows: Vec<(String, Vec<u8>)> = sqlx::query!(
        r#"SELECT subject_id, wrapped AS "wrapped!" FROM public.subject_keys
          WHERE tenant_id = $1 AND subject_id = ANY ($2) AND wrapped IS NOT NULL"#,
        tenant,
        &subjects as &[&str],
    )
    .fetch_all(executor)
    .await?
    .into_iter()
    .map(|row| (row.subject_id, row.wrapped))
    .collect();
    Ok(keyring.with_subjects(
        tenant,
        rows.iter()
            .map(|(subject, wrapped)| (subject.as_str(), wrapped.as_slice())),
    )?)
}

#[cfg(any(test, feature = "test-util"))]
impl StoredEvent {
    /// A human's message with `text`, for unit tests (here and in the
    /// projectors, through the `test-util` feature).
    pub fn test_message(seq: i64, event_id: String, text: &str) -> Self {
        Self {
            seq,
            event_id,
            created_at: chrono::DateTime::UNIX_EPOCH,
            ts: chrono::DateTime::UNIX_EPOCH,
            session_id: "s".into(),
            channel: Channel::Private,
            actor_type: ActorType::Human,
            actor_id: "a".into(),
            agent_id: None,
            subject_id: None,
            kind: Kind::Message,
            sensitivity: Sensitivity::None,
            tags: vec![],
            content: serde_json::json!({ "text": text }),
            refs: vec![],
            artifact_id: None,
            hash: vec![],
            sealer: None,
            keyring: Keyring::none(),
            erased: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_high_and_secret_content_is_sealed() {
        let sealed: Vec<Sensitivity> = Sensitivity::ALL
            .iter()
            .copied()
            .filter(|s| s.is_sealed())
            .collect();
        assert_eq!(sealed, [Sensitivity::High, Sensitivity::Secret]);
    }

    #[test]
    fn sensitivities_compare_from_least_to_most_sensitive() {
        assert!(Sensitivity::None < Sensitivity::Low);
        assert!(Sensitivity::Low < Sensitivity::High);
        assert!(Sensitivity::High < Sensitivity::Secret);
    }
}
