//! Acceptance scenarios (PRD §10: A1–A12, P1–P3) as executable YAML:
//! `memd scenario run [DIR|FILE]...`.
//!
//! A scenario is a story an agent deployment lives through (onboarding a
//! legacy repository, a decision superseded, a handoff, a restart), told as
//! steps against a real daemon over HTTP, and the promises memd makes about
//! it as assertions. [`spec`] is the file format, [`runner`] plays one
//! scenario on a tenant of its own, [`assertions`] checks what it saw, and
//! [`target`] is the daemon: one this process starts on a fresh database
//! (and restarts when a scenario says so), or one already running.

pub mod assertions;
pub mod histories;
pub mod runner;
pub mod spec;
pub mod target;

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::Context;
use serde::Serialize;
use sqlx::PgPool;

pub use runner::{ScenarioReport, Status};
pub use target::Target;

/// The scenario files named by `paths`: each file as given, each folder's
/// `*.yaml` files, sorted by name.
pub fn files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading {}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
                .collect();
            found.sort();
            files.extend(found);
        } else if path.exists() {
            files.push(path.clone());
        } else {
            anyhow::bail!("{}: no such file or folder", path.display());
        }
    }
    Ok(files)
}

/// Runs one scenario file (a file that does not parse is a failed scenario).
pub async fn run_file(
    target: &mut Target,
    db: &PgPool,
    http: &reqwest::Client,
    file: &Path,
) -> ScenarioReport {
    let scenario = std::fs::read_to_string(file)
        .map_err(|err| err.to_string())
        .and_then(|text| spec::parse(&text));
    match scenario {
        Ok(scenario) => runner::run(target, db, http, file, &scenario).await,
        Err(err) => ScenarioReport::unreadable(file, err),
    }
}

/// A whole run, as written to the JSON report.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub command: String,
    pub started_at: String,
    pub target: String,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub total_ms: f64,
    pub scenarios: Vec<ScenarioReport>,
}

impl RunReport {
    pub fn ok(&self) -> bool {
        self.failed == 0
    }
}

/// Runs every file in order against `target`, printing a line per scenario
/// as it finishes (with each failing assertion's expected and actual).
pub async fn run_all(
    target: &mut Target,
    db: &PgPool,
    files: &[PathBuf],
    described: String,
) -> RunReport {
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(120))
        .build()
        .expect("an HTTP client");
    let started = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339();
    println!(
        "memd scenario run: {} scenario(s) against {described}",
        files.len()
    );
    println!(
        "  {:<5} {:<44} {:<16} {:>10}  {:<6} {:>8}",
        "id", "name", "principles", "assertions", "result", "time"
    );
    let mut scenarios = Vec::new();
    for file in files {
        let report = run_file(target, db, &http, file).await;
        print_line(&report);
        scenarios.push(report);
    }
    let count = |status| scenarios.iter().filter(|s| s.status == status).count();
    RunReport {
        command: redacted_command(std::env::args()),
        started_at,
        target: described,
        passed: count(Status::Passed),
        failed: count(Status::Failed),
        skipped: count(Status::Skipped),
        total_ms: started.elapsed().as_secs_f64() * 1000.0,
        scenarios,
    }
}

/// The command line as reports keep it: with any credential (a password in
/// `--database-url`, a token in `--restart-command`) redacted.
fn redacted_command(args: impl Iterator<Item = String>) -> String {
    let mut command = args.collect::<Vec<_>>().join(" ");
    crate::domain::redact::Redactor::default().redact_in_place(&mut command);
    command
}

fn print_line(report: &ScenarioReport) {
    let result = match report.status {
        Status::Passed => "PASS",
        Status::Failed => "FAIL",
        Status::Skipped => "SKIP",
    };
    let name: String = report.name.chars().take(44).collect();
    println!(
        "  {:<5} {:<44} {:<16} {:>10}  {:<6} {:>6.1} s",
        report.id,
        name,
        report.principles.join(" "),
        format!("{}/{}", report.passed_assertions(), report.assertions.len()),
        result,
        report.total_ms / 1000.0
    );
    if let Some(error) = &report.error {
        println!(
            "        {}: {error}",
            if report.status == Status::Skipped {
                "skipped"
            } else {
                "error"
            }
        );
    }
    for failed in report.assertions.iter().filter(|a| !a.passed) {
        println!("        FAIL {}: {}", failed.kind, failed.assertion);
        println!("             expected: {}", failed.expected);
        println!("             actual:   {}", failed.actual);
    }
}

/// Writes the report as JSON (creating its folder).
pub fn write_report(report: &RunReport, path: &Path) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::redacted_command;

    #[test]
    fn the_reported_command_keeps_no_credentials() {
        let args = [
            "memd",
            "scenario",
            "run",
            "--database-url",
            "postgres://memd:s3cr3t-pw@db:5432/memd",
            "--restart-command",
            "TOKEN=abcdef0123456789 systemctl restart memd",
        ];
        let command = redacted_command(args.iter().map(|a| a.to_string()));
        assert!(!command.contains("s3cr3t-pw"), "{command}");
        assert!(!command.contains("abcdef0123456789"), "{command}");
        assert!(
            command.starts_with("memd scenario run --database-url"),
            "{command}"
        );
    }
}
