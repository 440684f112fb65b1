//! Each kind's `content` as projectors read it: one struct per kind, its
//! fields borrowed from the stored event, so a projector matches on
//! [`Content`] and names fields the compiler checks instead of looking
//! them up by string.
//!
//! The shapes are what the log stores, after memd's append edge checked
//! and normalized what a client sent (`src/domain/event.rs`): a tool
//! output's `output`, for one, is stored as `excerpt_text` and
//! `line_range`. A test there sends an event of every kind with every
//! field set and checks that each field read here is one the edge stored.
//!
//! Every field is optional and lists default to empty, as the projectors
//! always read them: a projection decides what a missing field means
//! (a task update without a status is `open`). Content that is not of its
//! kind's shape at all (never accepted by the edge) reads as
//! [`Content::Other`], which no projector takes anything from.

use serde::Deserialize;
use serde_json::Value;

use crate::event::Kind;

/// An event's content, by its kind.
#[derive(Debug)]
pub enum Content<'a> {
    Message(Message<'a>),
    Summary(Summary<'a>),
    ToolResult(ToolOutput<'a>),
    Artifact(Document<'a>),
    Decision(Decision<'a>),
    TaskUpdate(TaskUpdate<'a>),
    ViewUpdate(ViewUpdate<'a>),
    Handoff(Handoff<'a>),
    ToolCall(ToolCall<'a>),
    Retraction(Retraction<'a>),
    /// An erasure, a kind this build does not know, or content not of its
    /// kind's shape: nothing any projection reads.
    Other,
}

/// `content` of a `message`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Message<'a> {
    #[serde(borrow)]
    pub text: Option<&'a str>,
}

/// `content` of a `retraction`: why the events its `refs` name were
/// withdrawn.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Retraction<'a> {
    #[serde(borrow)]
    pub reason: Option<&'a str>,
}

/// `content` of a `summary`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Summary<'a> {
    #[serde(borrow)]
    pub text: Option<&'a str>,
    /// What the summary states of decision keys, as sent (extra fields
    /// and all: the `summaries` table keeps them); [`Summary::claims`]
    /// reads them.
    #[serde(rename = "claims")]
    pub claims_as_sent: Option<Value>,
}

impl Summary<'_> {
    /// Each claim's decision key and the value it states (claims without
    /// both are not claims).
    pub fn claims(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.claims_as_sent
            .as_ref()
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|claim| Some((claim.get("key")?.as_str()?, claim.get("value")?)))
    }
}

/// `content` of a `tool_result` as stored: the output, normalized and cut
/// to an excerpt, and where it came from.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ToolOutput<'a> {
    #[serde(borrow)]
    pub excerpt_text: Option<&'a str>,
    /// The excerpt's first line (of `line_range`, its first and last).
    #[serde(rename = "line_range", deserialize_with = "first_line")]
    pub first_line: Option<i64>,
    #[serde(borrow)]
    pub tool: Option<&'a str>,
    /// The file or resource.
    #[serde(borrow)]
    pub path: Option<&'a str>,
}

/// `content` of an `artifact` as stored: a named document, its text
/// normalized and cut to an excerpt like a tool output's.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Document<'a> {
    #[serde(borrow)]
    pub excerpt_text: Option<&'a str>,
    /// The excerpt's first line (of `line_range`, its first and last).
    #[serde(rename = "line_range", deserialize_with = "first_line")]
    pub first_line: Option<i64>,
    #[serde(borrow)]
    pub name: Option<&'a str>,
}

/// `content` of a `decision`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Decision<'a> {
    #[serde(borrow)]
    pub decision: Option<&'a str>,
    #[serde(borrow)]
    pub key: Option<&'a str>,
    #[serde(borrow)]
    pub scope: Option<&'a str>,
    /// The decision id this one replaces.
    #[serde(borrow)]
    pub supersedes: Option<&'a str>,
    #[serde(deserialize_with = "present")]
    pub value: Option<Value>,
    pub confidence: Option<f64>,
    #[serde(borrow)]
    pub rationale: Vec<&'a str>,
    #[serde(borrow)]
    pub constraints: Vec<&'a str>,
    #[serde(borrow)]
    pub alternatives: Vec<&'a str>,
    #[serde(borrow)]
    pub consequences: Vec<&'a str>,
}

/// `content` of a `task_update`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TaskUpdate<'a> {
    #[serde(borrow)]
    pub task_id: Option<&'a str>,
    #[serde(borrow)]
    pub status: Option<&'a str>,
    #[serde(borrow)]
    pub title: Option<&'a str>,
    #[serde(borrow)]
    pub details: Option<&'a str>,
}

/// `content` of a `view_update`: the whole new text of a view.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ViewUpdate<'a> {
    #[serde(borrow)]
    pub view: Option<&'a str>,
    #[serde(borrow)]
    pub text: Option<&'a str>,
}

/// `content` of a `tool_call`: the tool and its arguments, as sent
/// (redacted at the append edge).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ToolCall<'a> {
    #[serde(borrow)]
    pub tool: Option<&'a str>,
    pub args: Option<Value>,
}

/// `content` of a `handoff`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Handoff<'a> {
    #[serde(borrow)]
    pub to_agent: Option<&'a str>,
    #[serde(borrow)]
    pub task: Option<&'a str>,
    #[serde(borrow)]
    pub task_id: Option<&'a str>,
    #[serde(borrow)]
    pub constraints: Vec<&'a str>,
    #[serde(borrow)]
    pub decision_ids: Vec<&'a str>,
    #[serde(borrow)]
    pub required_files: Vec<&'a str>,
    #[serde(borrow)]
    pub open_questions: Vec<&'a str>,
}

/// A field that is present is `Some`, even when it is `null` (a decision
/// may decide that a value is null; a missing value is no value at all).
fn present<'de, D: serde::Deserializer<'de>>(field: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(field).map(Some)
}

/// The first line of a `line_range`, or none when it is not a list that
/// starts with a line number (no excerpt is lost over its line).
fn first_line<'de, D: serde::Deserializer<'de>>(field: D) -> Result<Option<i64>, D::Error> {
    Value::deserialize(field).map(|range| range.get(0).and_then(Value::as_i64))
}

impl<'a> Content<'a> {
    /// Reads `content` as the shape of `kind`.
    pub fn read(kind: Kind, content: &'a Value) -> Self {
        fn shaped<'a, T: Deserialize<'a>>(
            content: &'a Value,
            variant: fn(T) -> Content<'a>,
        ) -> Content<'a> {
            T::deserialize(content).map_or(Content::Other, variant)
        }
        match kind {
            Kind::Message => shaped(content, Content::Message),
            Kind::Summary => shaped(content, Content::Summary),
            Kind::ToolResult => shaped(content, Content::ToolResult),
            Kind::Artifact => shaped(content, Content::Artifact),
            Kind::Decision => shaped(content, Content::Decision),
            Kind::TaskUpdate => shaped(content, Content::TaskUpdate),
            Kind::ViewUpdate => shaped(content, Content::ViewUpdate),
            Kind::Handoff => shaped(content, Content::Handoff),
            Kind::ToolCall => shaped(content, Content::ToolCall),
            Kind::Retraction => shaped(content, Content::Retraction),
            Kind::Erasure => Content::Other,
        }
    }

    /// The fields read of `kind`'s content (for the test that the append
    /// edge stores every one of them).
    pub fn fields(kind: Kind) -> &'static [&'static str] {
        use fields::of;
        match kind {
            Kind::Message => of::<Message>(),
            Kind::Summary => of::<Summary>(),
            Kind::ToolResult => of::<ToolOutput>(),
            Kind::Artifact => of::<Document>(),
            Kind::Decision => of::<Decision>(),
            Kind::TaskUpdate => of::<TaskUpdate>(),
            Kind::ViewUpdate => of::<ViewUpdate>(),
            Kind::Handoff => of::<Handoff>(),
            Kind::ToolCall => of::<ToolCall>(),
            Kind::Retraction => of::<Retraction>(),
            Kind::Erasure => &[],
        }
    }
}

/// A struct's field names, as its `Deserialize` implementation states
/// them to a deserializer (serde passes them to `deserialize_struct`).
mod fields {
    use serde::{
        Deserialize,
        de::{self, Visitor},
        forward_to_deserialize_any,
    };

    struct Names;

    #[derive(Debug)]
    struct Found(&'static [&'static str]);

    impl std::fmt::Display for Found {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "fields {:?}", self.0)
        }
    }
    impl std::error::Error for Found {}
    impl de::Error for Found {
        fn custom<T: std::fmt::Display>(_: T) -> Self {
            Found(&[])
        }
    }

    impl<'de> de::Deserializer<'de> for Names {
        type Error = Found;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
            Err(Found(&[]))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Found> {
            Err(Found(fields))
        }

        forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }

    pub(super) fn of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
        match T::deserialize(Names) {
            Ok(_) => &[],
            Err(Found(fields)) => fields,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_kind_reads_its_own_fields() {
        let decision = json!({"decision": "Pages of 200", "key": "page-size", "scope": "project",
            "supersedes": "evt_1", "value": 200, "confidence": 0.8, "rationale": ["timeouts"]});
        let Content::Decision(read) = Content::read(Kind::Decision, &decision) else {
            panic!("a decision reads as one");
        };
        assert_eq!(read.key, Some("page-size"));
        assert_eq!(read.supersedes, Some("evt_1"));
        assert_eq!(read.value, Some(json!(200)));
        assert_eq!(read.rationale, ["timeouts"]);
        // A value of null is a value; no value is none.
        let null = json!({"decision": "No limit", "value": null});
        let Content::Decision(read_null) = Content::read(Kind::Decision, &null) else {
            panic!("a decision reads as one");
        };
        assert_eq!(read_null.value, Some(Value::Null));
        let without = json!({"decision": "x"});
        let Content::Decision(no_value) = Content::read(Kind::Decision, &without) else {
            panic!("a decision reads as one");
        };
        assert_eq!(no_value.value, None);
        assert!(read.constraints.is_empty());
        // A line range gives the excerpt's first line; one that is not a
        // list of lines gives none, and the excerpt is still read.
        for (range, first) in [(json!([5, 9]), Some(5)), (json!("5-9"), None)] {
            let output =
                json!({"tool": "fs.read", "excerpt_text": "fn main() {}", "line_range": range});
            let Content::ToolResult(read) = Content::read(Kind::ToolResult, &output) else {
                panic!("a tool output reads as one");
            };
            assert_eq!(
                (read.excerpt_text, read.first_line),
                (Some("fn main() {}"), first)
            );
        }
        // The same content read as a task update holds nothing it reads.
        let Content::TaskUpdate(task) = Content::read(Kind::TaskUpdate, &decision) else {
            panic!("extra fields are kept, not refused");
        };
        assert_eq!(task.task_id, None);
        // Not an object, or a field of the wrong type: nothing is read.
        for wrong in [json!("text"), json!({"text": 3})] {
            assert!(matches!(
                Content::read(Kind::Message, &wrong),
                Content::Other
            ));
        }
        assert!(matches!(
            Content::read(Kind::Erasure, &json!({"text": "no content of its own"})),
            Content::Other
        ));
    }

    #[test]
    fn the_fields_are_the_structs_own() {
        assert_eq!(Content::fields(Kind::Message), ["text"]);
        assert_eq!(
            Content::fields(Kind::TaskUpdate),
            ["task_id", "status", "title", "details"]
        );
        assert!(Content::fields(Kind::Decision).contains(&"supersedes"));
        assert_eq!(Content::fields(Kind::ToolCall), ["tool", "args"]);
    }
}
