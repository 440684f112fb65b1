//! Tool result normalization (PRD §7.4): the event keeps an excerpt of at most
//! 64 KB with the line range it covers; a larger output is stored whole in an
//! artifact, written in the same transaction as the event.
//!
//! Stored content: `{tool, path?, excerpt_text, line_range: [first, last],
//! truncated, output_bytes, output_lines, artifact_id?, artifact_sha256?}` plus
//! any extra fields the client sent (exit codes and the like).

use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::{
    FieldError,
    event::{NewArtifact, non_empty, shape, take_string},
    limits::TOOL_EXCERPT_BYTES,
};

/// `content` of a `tool_result`, as sent. memd stores it normalized: the
/// output becomes `excerpt_text` (at most 64 KiB) with `line_range`,
/// `truncated`, `output_bytes`, `output_lines`, and, when cut, `artifact_id`
/// and `artifact_sha256`; those fields may not be sent.
#[derive(Deserialize, utoipa::ToSchema)]
#[allow(dead_code)] // read by serde to check types
pub(super) struct ToolResultContent {
    tool: String,
    /// The file or resource the output came from.
    path: Option<String>,
    /// Text, or any JSON (kept as its pretty-printed text).
    output: Value,
    /// The line number of the output's first line; default 1.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    line_start: Option<u64>,
}

/// The largest first line a long text may say it starts at: chunks keep
/// line numbers as 32-bit integers, and the excerpt's last line (64 KiB
/// further at most) must fit too.
pub const MAX_LINE_START: u64 = 1_000_000_000;

pub(crate) fn check_shape(content: &Value) -> Result<(), FieldError> {
    let c: ToolResultContent = shape(content)?;
    non_empty("content.tool", &c.tool)?;
    check_line_start(content)?;
    reserved(content, "output")
}

/// `content.line_start`, when sent: a whole number of 1 to
/// [`MAX_LINE_START`] ([`normalize_text`] reads it).
fn check_line_start(content: &Value) -> Result<(), FieldError> {
    match content.get("line_start") {
        None => Ok(()),
        Some(value)
            if value
                .as_u64()
                .is_some_and(|n| (1..=MAX_LINE_START).contains(&n)) =>
        {
            Ok(())
        }
        Some(_) => Err(FieldError::new(
            "content.line_start",
            format!(
                "must be a whole number from 1 (lines are numbered from 1) to {MAX_LINE_START}"
            ),
        )),
    }
}

/// The fields memd sets when it normalizes a long text may not be sent.
fn reserved(content: &Value, field: &str) -> Result<(), FieldError> {
    for reserved in [
        "excerpt_text",
        "line_range",
        "truncated",
        "artifact_id",
        "artifact_sha256",
    ] {
        if content.get(reserved).is_some() {
            return Err(FieldError::new(
                format!("content.{reserved}"),
                format!("is set by memd when it normalizes the text; send `{field}` instead"),
            ));
        }
    }
    Ok(())
}

pub struct NormalizedToolResult {
    pub content: Value,
    pub artifact: Option<NewArtifact>,
}

/// Normalizes an already shape-checked and redacted tool-result content.
pub fn normalize(content: Value) -> Result<NormalizedToolResult, FieldError> {
    normalize_text(content, &OUTPUT)
}

/// Where the long text of an event kind is, and what its artifact keeps.
pub struct LongText {
    /// The content field holding the text.
    field: &'static str,
    /// Content fields copied into the artifact's `meta`.
    meta: &'static [&'static str],
    /// `artifacts.kind`.
    artifact_kind: &'static str,
}

/// A tool result's `output`.
const OUTPUT: LongText = LongText {
    field: "output",
    meta: &["tool", "path"],
    artifact_kind: "tool_output",
};

/// An `artifact` event's `text` (a document an agent produced or received).
pub const DOCUMENT: LongText = LongText {
    field: "text",
    meta: &["name", "media_type"],
    artifact_kind: "blob",
};

/// `content` of an `artifact` event, as sent: a named document. Stored
/// like a tool output: `excerpt_text` (at most 64 KiB) with `line_range`,
/// and, when longer, the whole text in an artifact (`artifact_id`).
#[derive(Deserialize, utoipa::ToSchema)]
#[allow(dead_code)] // read by serde to check types
pub(super) struct ArtifactContent {
    /// What it is called (a file name, a title): 1-256 bytes.
    name: String,
    /// Its text.
    text: String,
    /// Default `text/plain`.
    media_type: Option<String>,
}

pub(crate) fn check_artifact_shape(content: &Value) -> Result<(), FieldError> {
    let c: ArtifactContent = shape(content)?;
    non_empty("content.name", &c.name)?;
    if c.name.len() > super::limits::MAX_ID_BYTES {
        return Err(FieldError::new("content.name", "must be at most 256 bytes"));
    }
    check_line_start(content)?;
    reserved(content, "text")
}

/// Normalizes the long text of a `tool_result` or an `artifact` (PRD §7.4).
pub fn normalize_text(content: Value, long: &LongText) -> Result<NormalizedToolResult, FieldError> {
    let Value::Object(mut map) = content else {
        return Err(FieldError::new("content", "must be a JSON object"));
    };
    let output = match take_string(&mut map, long.field) {
        Some(text) => text,
        // A structured output is kept as its pretty-printed JSON text.
        None => map
            .remove(long.field)
            .map(|v| serde_json::to_string_pretty(&v).expect("a JSON value serializes"))
            .unwrap_or_default(),
    };
    let line_start = map
        .remove("line_start")
        .and_then(|v| v.as_u64())
        .unwrap_or(1);

    let excerpt = excerpt_of(&output, TOOL_EXCERPT_BYTES);
    let truncated = excerpt.len() < output.len();
    let excerpt_lines = count_lines(excerpt).max(1) as u64;
    let mut normalized = Map::new();
    normalized.insert("excerpt_text".into(), Value::String(excerpt.to_string()));
    normalized.insert(
        "line_range".into(),
        json!([line_start, line_start + excerpt_lines - 1]),
    );
    normalized.insert("truncated".into(), Value::Bool(truncated));
    normalized.insert("output_bytes".into(), json!(output.len()));
    normalized.insert("output_lines".into(), json!(count_lines(&output)));

    let artifact = truncated.then(|| {
        let sha256: [u8; 32] = Sha256::digest(output.as_bytes()).into();
        let artifact_id = super::new_id("art");
        normalized.insert("artifact_id".into(), Value::String(artifact_id.clone()));
        normalized.insert("artifact_sha256".into(), Value::String(hex::encode(sha256)));
        let mut meta = Map::new();
        for key in long.meta {
            if let Some(v) = map.get(*key) {
                meta.insert((*key).into(), v.clone());
            }
        }
        meta.insert("line_start".into(), json!(line_start));
        NewArtifact {
            kind: long.artifact_kind,
            artifact_id,
            media_type: "text/plain; charset=utf-8",
            sha256,
            bytes: output.into_bytes(),
            meta: Value::Object(meta),
        }
    });
    // Client fields (tool, path, exit codes, ...) stay; memd's fields win.
    map.extend(normalized);
    Ok(NormalizedToolResult {
        content: Value::Object(map),
        artifact,
    })
}

/// The longest prefix of `text` of at most `max` bytes that ends at a line
/// break, or, when the first line alone is too long, at a character boundary.
fn excerpt_of(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    match text[..cut].rfind('\n') {
        Some(newline) => &text[..=newline],
        None => &text[..cut],
    }
}

fn count_lines(text: &str) -> usize {
    if text.is_empty() {
        0
    } else {
        text.lines().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalized(content: Value) -> NormalizedToolResult {
        normalize(content).expect("normalizes")
    }

    #[test]
    fn a_small_output_stays_whole() {
        let out = normalized(
            json!({"tool": "fs.read_file", "path": "README.md", "output": "a\nb\nc\n", "exit_code": 0}),
        );
        assert!(out.artifact.is_none());
        let c = out.content;
        assert_eq!(c["excerpt_text"], "a\nb\nc\n");
        assert_eq!(c["line_range"], json!([1, 3]));
        assert_eq!(c["truncated"], false);
        assert_eq!(c["exit_code"], 0);
        assert_eq!(c["path"], "README.md");
        assert!(c.get("output").is_none());
    }

    #[test]
    fn a_large_output_is_cut_at_a_line_and_kept_whole_in_an_artifact() {
        let line = "0123456789".repeat(10) + "\n"; // 101 bytes
        let output = line.repeat(1000); // 101,000 bytes
        let out = normalized(json!({"tool": "fs.read_file", "output": output, "line_start": 10}));
        let c = &out.content;
        let excerpt = c["excerpt_text"].as_str().unwrap();
        assert!(excerpt.len() <= TOOL_EXCERPT_BYTES);
        assert!(excerpt.ends_with('\n'));
        let lines = (TOOL_EXCERPT_BYTES / 101) as u64;
        assert_eq!(excerpt.len() as u64, lines * 101);
        assert_eq!(c["line_range"], json!([10, 10 + lines - 1]));
        assert_eq!(c["truncated"], true);
        assert_eq!(c["output_lines"], 1000);
        let artifact = out.artifact.expect("artifact");
        assert_eq!(artifact.bytes, output.as_bytes());
        assert_eq!(c["artifact_id"], artifact.artifact_id);
        assert_eq!(c["artifact_sha256"], hex::encode(artifact.sha256));
    }

    #[test]
    fn one_huge_line_is_cut_at_a_char_boundary() {
        let output = "é".repeat(TOOL_EXCERPT_BYTES); // 2 bytes each
        let out = normalized(json!({"tool": "cat", "output": output}));
        let excerpt = out.content["excerpt_text"].as_str().unwrap();
        assert_eq!(excerpt.len(), TOOL_EXCERPT_BYTES);
        assert!(out.artifact.is_some());
    }

    #[test]
    fn structured_output_is_kept_as_json_text() {
        let out = normalized(json!({"tool": "api", "output": {"ok": true}}));
        assert_eq!(out.content["excerpt_text"], "{\n  \"ok\": true\n}");
    }

    #[test]
    fn fields_memd_owns_are_refused() {
        let err = check_shape(&json!({"tool": "x", "output": "", "truncated": false})).unwrap_err();
        assert_eq!(err.field, "content.truncated");
        let err = check_shape(&json!({"tool": "x", "output": "", "line_start": 0})).unwrap_err();
        assert_eq!(err.field, "content.line_start");
    }

    /// A first line past what a chunk's line numbers hold was a panic (an
    /// overflow adding the excerpt's lines) or a line range read back
    /// negative; it is refused, in tool results and documents alike.
    #[test]
    fn a_first_line_number_is_bounded() {
        for bad in [
            json!(u64::MAX),
            json!(i64::MAX),
            json!(MAX_LINE_START + 1),
            json!(-1),
            json!(2.5),
            json!("3"),
        ] {
            let err = check_shape(&json!({"tool": "x", "output": "a\nb", "line_start": bad}))
                .unwrap_err();
            assert_eq!(err.field, "content.line_start", "{bad}");
            let err =
                check_artifact_shape(&json!({"name": "n", "text": "a\nb", "line_start": bad}))
                    .unwrap_err();
            assert_eq!(err.field, "content.line_start", "{bad}");
        }
        let content = json!({"tool": "x", "output": "a\nb", "line_start": MAX_LINE_START});
        check_shape(&content).unwrap();
        let last = MAX_LINE_START + 1;
        assert_eq!(
            normalized(content).content["line_range"],
            json!([MAX_LINE_START, last])
        );
    }
}
