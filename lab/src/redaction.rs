//! `memd-bench redaction`: how often the redactor fires on ordinary text,
//! where nothing should be secret: the turns of LoCoMo conversations (chat)
//! and a source tree (code and docs, this repository's own by default).
//! Each redaction is counted by pattern and shown with its context, the
//! secret itself masked, so a reader can judge whether it was a false
//! positive.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
};

use anyhow::Context;

use super::harness::{titled_header, write_report};
use memd::domain::redact::Redactor;

pub struct Options {
    /// LoCoMo conversation files (`*.json`).
    pub dir: PathBuf,
    /// A source tree.
    pub source: PathBuf,
}

/// File kinds of a source tree that are read.
const SOURCE_EXTENSIONS: &[&str] = &[
    "rs", "md", "py", "sql", "sh", "yaml", "yml", "toml", "js", "html",
];
/// Examples shown per pattern and corpus.
const EXAMPLES: usize = 5;

/// What one corpus made the redactor do.
#[derive(Default)]
struct Tally {
    texts: usize,
    bytes: usize,
    redacted_texts: usize,
    /// Pattern → (redactions, examples).
    by_pattern: BTreeMap<String, (usize, Vec<String>)>,
}

impl Tally {
    fn add(&mut self, redactor: &Redactor, text: &str) {
        self.texts += 1;
        self.bytes += text.len();
        let Some(redacted) = redactor.redact(text) else {
            return;
        };
        self.redacted_texts += 1;
        // Markers the text did not hold already (this repository's own
        // source spells some out).
        for name in redactor.pattern_names() {
            let marker = format!("[REDACTED:{name}]");
            let added = redacted.matches(&marker).count() - text.matches(&marker).count();
            if added == 0 {
                continue;
            }
            let entry = self.by_pattern.entry(name.to_owned()).or_default();
            entry.0 += added;
            let lines = redacted
                .lines()
                .filter(|line| line.contains(&marker) && !text.contains(*line));
            for line in lines.take(EXAMPLES.saturating_sub(entry.1.len())) {
                let line: String = line.trim().chars().take(160).collect();
                entry.1.push(line.replace('|', "\\|").replace('`', "'"));
            }
        }
    }
}

pub fn run(options: Options, out: &Path) -> anyhow::Result<()> {
    let redactor = Redactor::default();
    let mut chat = Tally::default();
    for text in super::locomo::turn_texts(&options.dir)? {
        chat.add(&redactor, &text);
    }
    let mut code = Tally::default();
    for file in source_files(&options.source)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        code.add(&redactor, &text);
    }
    let mut report = titled_header("memd-bench redaction", "the redactor alone, no database");
    let _ = writeln!(
        report,
        "\nThe built-in redaction patterns over text where nothing is secret: each LoCoMo turn \
         (`{}`) and each file of `{}` ({}). A redacted text counts once; each redaction is counted by \
         pattern, with up to {EXAMPLES} examples (the line as redacted).\n",
        options.dir.display(),
        options.source.display(),
        SOURCE_EXTENSIONS.join(", ")
    );
    let _ = writeln!(
        report,
        "| corpus | texts | MB | texts redacted | redactions |"
    );
    let _ = writeln!(report, "|---|---:|---:|---:|---:|");
    for (name, tally) in [("LoCoMo turns", &chat), ("source files", &code)] {
        let redactions: usize = tally.by_pattern.values().map(|(n, _)| n).sum();
        let _ = writeln!(
            report,
            "| {name} | {} | {:.1} | {} | {redactions} |",
            tally.texts,
            tally.bytes as f64 / 1e6,
            tally.redacted_texts
        );
    }
    for (name, tally) in [("LoCoMo turns", &chat), ("source files", &code)] {
        let _ = writeln!(report, "\n## {name}\n");
        if tally.by_pattern.is_empty() {
            let _ = writeln!(report, "No redaction.");
            continue;
        }
        let _ = writeln!(
            report,
            "| pattern | redactions | examples |\n|---|---:|---|"
        );
        for (pattern, (count, examples)) in &tally.by_pattern {
            let _ = writeln!(
                report,
                "| {pattern} | {count} | {} |",
                examples
                    .iter()
                    .map(|e| format!("`{e}`"))
                    .collect::<Vec<_>>()
                    .join("<br>")
            );
        }
    }
    write_report(out, &report)
}

/// The files of `root` with a [`SOURCE_EXTENSIONS`] extension, skipping
/// hidden folders, `target` and dated benchmark results.
fn source_files(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries =
            std::fs::read_dir(&folder).with_context(|| format!("reading {}", folder.display()))?;
        for entry in entries {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with('.') || name == "target" || name == "node_modules" {
                continue;
            }
            if path.is_dir() {
                folders.push(path);
            } else if path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| SOURCE_EXTENSIONS.contains(&e))
            {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}
