//! How memory is written into a bundle's prompt, and why its token counts
//! add up exactly.
//!
//! A bundle is a sequence of blocks: a section heading (`## rules\n`), then
//! per item a handle (`[E3]`), a meta line and a body. What was said or run
//! (the evidence and the recent window) is shown under the day it happened
//! (`### 2026-11-23\n`), each item's meta line giving the time of day only;
//! other items (views, tasks, decisions, handoffs) carry their full date:
//!
//! ```text
//! ## retrieved_evidence
//! ### 2026-11-23
//! [E1] alice · 10:30
//! We deploy on Fridays only after the smoke tests pass.
//! [E2] fs · tool_result fs.read_file README.md lines 1-40 · 10:31
//! # legacy-billing
//! ...
//! ```
//!
//! A day heading costs about 9 tokens, the date it takes out of each meta
//! line about 7: a bundle whose evidence spans a few days holds more of it.
//!
//! The BPE encodings split text into pieces with a regular expression
//! before merging bytes, and a piece can only run across a block boundary
//! through runs of whitespace ending in line breaks, or through `[\r\n/]*`
//! after punctuation. So every meta line starts with a space and ends with a
//! digit then `\n`, every body starts with a line that is not blank and ends
//! with exactly one `\n` after a non-space, every heading and handle starts
//! with `#` or `[`, and every heading ends with a letter or digit then `\n`:
//! no piece crosses a boundary, and the tokens of the whole prompt are
//! exactly the sum of the tokens of its blocks. That lets the projector
//! count an item's meta line and body once and store it
//! (`chunks.token_est`), and the read side budget a bundle by adding stored
//! numbers and a count per day shown (proved by the property test below,
//! and by the bundle's own property test).

use chrono::{DateTime, NaiveDate, Utc};

/// The body of an item: `text` without its leading blank lines and
/// trailing whitespace, closed by one newline. Empty when nothing is left.
/// (A leading blank line, even of spaces, would merge with the meta line's
/// newline into one piece.)
pub fn body(text: &str) -> String {
    let mut rest = text;
    while let Some(end) = rest.find('\n')
        && rest[..end].trim().is_empty()
    {
        rest = &rest[end + 1..];
    }
    let trimmed = rest.trim_end();
    if trimmed.is_empty() {
        return String::new();
    }
    let mut body = String::with_capacity(trimmed.len() + 1);
    body.push_str(trimmed);
    body.push('\n');
    body
}

/// A meta line: ` part · part · 2026-11-23 10:30\n`. Parts are flattened to
/// one line; empty parts are left out.
pub fn meta<'a>(parts: impl IntoIterator<Item = &'a str>, at: DateTime<Utc>) -> String {
    meta_line(parts, &at.format("%Y-%m-%d %H:%M").to_string())
}

/// The meta line of an item shown under its [`day`] heading:
/// ` part · part · 10:30\n`.
pub fn meta_of_day<'a>(parts: impl IntoIterator<Item = &'a str>, at: DateTime<Utc>) -> String {
    meta_line(parts, &at.format("%H:%M").to_string())
}

fn meta_line<'a>(parts: impl IntoIterator<Item = &'a str>, when: &str) -> String {
    let mut line = String::new();
    for part in parts {
        let part = one_line(part);
        if part.is_empty() {
            continue;
        }
        line.push(' ');
        line.push_str(&part);
        line.push_str(" ·");
    }
    line.push(' ');
    line.push_str(when);
    line.push('\n');
    line
}

/// The meta line of a chunk, shown under its day: who, what (tool and
/// lines, decision key, task; nothing for a plain message), at what time.
pub fn chunk_meta(
    actor_id: &str,
    kind: &str,
    source: Option<&str>,
    lines: Option<(i32, i32)>,
    at: DateTime<Utc>,
) -> String {
    let label = match kind {
        "message" => String::new(),
        "tool_result" => {
            let mut label = format!("tool_result {}", source.unwrap_or_default());
            if let Some((first, last)) = lines {
                label.push_str(&format!(" lines {first}-{last}"));
            }
            label
        }
        _ => source.unwrap_or(kind).to_owned(),
    };
    meta_of_day([actor_id, label.as_str()], at)
}

/// A section heading: `## name\n` (names are `[a-z_]+`).
pub fn heading(name: &str) -> String {
    format!("## {name}\n")
}

/// The heading of a day, above the items that happened on it:
/// `### 2026-11-23\n` (UTC).
pub fn day(date: NaiveDate) -> String {
    format!("### {}\n", date.format("%Y-%m-%d"))
}

/// An item's handle, by which the prompt cites it: `[E3]`.
pub fn handle(prefix: char, index: usize) -> String {
    format!("[{prefix}{index}]")
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::projections::{Encoding, TokenCounter};

    #[test]
    fn bodies_and_meta_lines_have_their_shape() {
        assert_eq!(body("\n\n  indented\ncode  \n\n"), "  indented\ncode\n");
        assert_eq!(body(" \n\t\r\n/x"), "/x\n");
        assert_eq!(body(" \n\t"), "");
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        assert_eq!(
            meta(["alice", "", "tool_result  a\nb"], at),
            " alice · tool_result a b · 2023-11-14 22:13\n"
        );
        assert_eq!(
            chunk_meta("fs", "tool_result", Some("cat"), Some((1, 40)), at),
            " fs · tool_result cat lines 1-40 · 22:13\n"
        );
        assert_eq!(
            chunk_meta("alice", "message", None, None, at),
            " alice · 22:13\n"
        );
        assert_eq!(day(at.date_naive()), "### 2023-11-14\n");
    }

    fn text() -> impl Strategy<Value = String> {
        // Line breaks, slashes, punctuation, digits, letters of several
        // scripts, spaces and tabs: the characters the tokenizer's piece
        // boundaries depend on.
        proptest::collection::vec(
            prop_oneof![
                Just("\n".to_owned()),
                Just("\r\n".to_owned()),
                Just(" \n".to_owned()),
                Just("\t \r\n".to_owned()),
                Just("/".to_owned()),
                Just(" ".to_owned()),
                Just("\t".to_owned()),
                Just("'s".to_owned()),
                "[.,;:!?#*()\\[\\]{}<>\"'`~|-]{1,3}",
                "[0-9]{1,5}",
                "[a-zA-Z]{1,8}",
                "[éßЖ中文한국어🙂]{1,3}",
            ],
            0..40,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Counting a prompt equals adding the counts of its blocks.
        #[test]
        fn block_counts_add_up_to_the_prompt_count(
            items in proptest::collection::vec(
                (text(), text(), 1usize..250, any::<bool>(), 0i64..4_000_000_000),
                1..8,
            ),
            cl100k in any::<bool>(),
        ) {
            let counter = TokenCounter::new(if cl100k { Encoding::Cl100kBase } else { Encoding::O200kBase });
            let mut prompt = heading("retrieved_evidence");
            let mut sum = counter.count(&prompt);
            for (actor, content, index, of_day, secs) in &items {
                let at = DateTime::from_timestamp(*secs, 0).unwrap();
                if *of_day {
                    let heading = day(at.date_naive());
                    sum += counter.count(&heading);
                    prompt.push_str(&heading);
                }
                let item_handle = handle('E', *index);
                let line = if *of_day {
                    meta_of_day([actor.as_str(), "message"], at)
                } else {
                    meta([actor.as_str(), "message"], at)
                };
                let block = line + &body(content);
                sum += counter.count(&item_handle) + counter.count(&block);
                prompt.push_str(&item_handle);
                prompt.push_str(&block);
                let next = heading("recent_window");
                sum += counter.count(&next);
                prompt.push_str(&next);
            }
            prop_assert_eq!(counter.count(&prompt), sum, "{:?}", prompt);
        }
    }
}
