//! `memd drill fuzz`: schemathesis generates requests from the daemon's own
//! OpenAPI document (valid ones and invalid ones) and checks every answer:
//! no server error, status codes, content types, headers and bodies as the
//! document says, invalid data refused, authentication never ignored.
//!
//! One check is left out of the verdict: `positive_data_acceptance` fails
//! when the API refuses a request the document allows. Some of memd's rules
//! cannot be written in OpenAPI (a proof's `tree_size` at most the log's
//! length, `first` at most `second`), so such refusals are correct 400s; the
//! report still counts them.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use super::{Daemon, event, prepare, run_program, write_section};
use crate::{
    db::{self, ScratchDatabase},
    drill::report::titled_header,
};

/// The schemathesis release the drill installs (pinned: checks and their
/// codes change between releases).
const SCHEMATHESIS: &str = "schemathesis==4.32.5";
/// The one check left out of the verdict (see the module's comment).
const EXCLUDED_CHECK: &str = "positive_data_acceptance";

pub(super) async fn run(
    database_url: &str,
    max_examples: u32,
    seconds: Option<u64>,
    seed: u64,
    venv: &Path,
    out: &Path,
) -> anyhow::Result<()> {
    let schemathesis = install(venv).await?;
    let scratch = ScratchDatabase::create(database_url, "memd_drill").await?;
    let result = fuzz(
        database_url,
        &scratch,
        &schemathesis,
        max_examples,
        seconds,
        seed,
    )
    .await;
    scratch.drop_now().await?;
    let (report, malformed, environment) = result?;
    let verdict = Verdict::of(&report);
    let mut section = render(&report, &verdict, &environment);
    section.push_str(&render_malformed(&malformed));
    write_section(out, &section)?;
    anyhow::ensure!(
        verdict.failures.is_empty() && verdict.errors == 0,
        "schemathesis found failures (see {})",
        out.display()
    );
    anyhow::ensure!(
        malformed.iter().all(|case| case.held),
        "a malformed request was not refused as it must be (see {})",
        out.display()
    );
    Ok(())
}

/// A request no document describes, sent byte for byte, and what must come
/// back: the status, in the API's JSON error shape naming `field`.
struct Malformed {
    name: &'static str,
    status: u16,
    field: &'static str,
    /// What came back: the status line and body.
    answer: String,
    held: bool,
}

/// Requests schemathesis cannot make from the document: a key twice, a
/// field of no route, an integer past 64 bits, a path id that is not UTF-8,
/// an `Authorization` header holding a byte no token has, a body over the
/// limit on `/mcp`. Each must be refused in the API's error shape.
async fn malformed(base_url: &str, token: &str) -> anyhow::Result<Vec<Malformed>> {
    let address = base_url.trim_start_matches("http://").to_owned();
    let envelope = r#""session_id": "s1", "channel": "private", "actor": {"type": "human", "id": "u"}, "kind": "message""#;
    let post = |path: &str, body: String| -> Vec<u8> {
        format!(
            "POST {path} HTTP/1.1\r\nHost: memd\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    let bad_token = b"GET /api/v1/events HTTP/1.1\r\nHost: memd\r\nAuthorization: Bearer memd_\xff\xfe\r\nConnection: close\r\n\r\n".to_vec();
    let cases: Vec<(&'static str, Vec<u8>, u16, &'static str)> = vec![
        (
            "a key twice (`sensitivity`)",
            post(
                "/api/v1/events",
                format!(r#"{{{envelope}, "content": {{"text": "x"}}, "sensitivity": "high", "sensitivity": "none"}}"#),
            ),
            400,
            "sensitivity",
        ),
        (
            "an unknown field on POST /decisions (`sensitivty`)",
            post(
                "/api/v1/decisions",
                r#"{"session_id": "s1", "actor": {"type": "agent", "id": "a"}, "refs": ["evt_x"], "scope": "project", "decision": "x", "sensitivty": "high"}"#.to_owned(),
            ),
            400,
            "sensitivty",
        ),
        (
            "an integer past 64 bits",
            post(
                "/api/v1/events",
                format!(r#"{{{envelope}, "content": {{"text": "x", "n": 123456789012345678901234567890}}}}"#),
            ),
            400,
            "body",
        ),
        (
            "a path id that is not UTF-8 (`%FF`)",
            format!("GET /api/v1/events/%FF HTTP/1.1\r\nHost: memd\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n").into_bytes(),
            400,
            "path",
        ),
        ("bytes no token has in Authorization", bad_token, 401, ""),
        (
            "a body over the limit on /mcp",
            b"POST /mcp HTTP/1.1\r\nHost: memd\r\nContent-Type: application/json\r\nContent-Length: 999999999999\r\nConnection: close\r\n\r\n{".to_vec(),
            413,
            "body",
        ),
    ];
    let mut results = Vec::new();
    for (name, request, status, field) in cases {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(&address).await?;
        stream.write_all(&request).await?;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            stream.read_to_end(&mut answer),
        )
        .await;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let held = answer.starts_with(&format!("HTTP/1.1 {status}"))
            && json["error"]["code"].is_string()
            && (field.is_empty() || json["error"]["field"] == field);
        let first_line = answer.lines().next().unwrap_or_default().to_owned();
        results.push(Malformed {
            name,
            status,
            field,
            answer: format!("{first_line} {body}"),
            held,
        });
    }
    Ok(results)
}

fn render_malformed(cases: &[Malformed]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "\nMalformed requests the document cannot describe, sent byte for byte: each must be refused in the \
         API's error shape.\n\n| request | expected | answered | held |\n|---|---|---|---|\n",
    );
    for case in cases {
        let answer: String = case.answer.chars().take(160).collect();
        let _ = writeln!(
            out,
            "| {} | {} `{}` | `{}` | {} |",
            case.name,
            case.status,
            case.field,
            answer.replace('|', "\\|"),
            if case.held { "yes" } else { "NO" }
        );
    }
    out
}

/// The schemathesis program in `venv`, installed there from PyPI if missing.
async fn install(venv: &Path) -> anyhow::Result<PathBuf> {
    let program = venv.join("bin").join("schemathesis");
    if program.exists() {
        return Ok(program);
    }
    eprintln!("installing {SCHEMATHESIS} into {}", venv.display());
    run_program(
        tokio::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv),
    )
    .await?;
    run_program(
        tokio::process::Command::new(venv.join("bin").join("pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            SCHEMATHESIS,
        ]),
    )
    .await?;
    Ok(program)
}

async fn fuzz(
    database_url: &str,
    scratch: &ScratchDatabase,
    schemathesis: &Path,
    max_examples: u32,
    seconds: Option<u64>,
    seed: u64,
) -> anyhow::Result<(Value, Vec<Malformed>, String)> {
    let prepared = prepare(scratch.options.clone()).await?;
    let url = db::with_database(database_url, &scratch.name);
    let (daemon, _) = Daemon::start(&url, "hashed").await?;
    // Something in the log, so that reads and proofs have events to find.
    super::client()
        .post(format!("{}/api/v1/events", daemon.base_url))
        .bearer_auth(&prepared.token)
        .json(&event(
            "seed-1".into(),
            "we chose PostgreSQL for the queue".into(),
        ))
        .send()
        .await?
        .error_for_status()?;
    let report_path =
        std::env::temp_dir().join(format!("memd-drill-fuzz-{}.json", ulid::Ulid::generate()));
    let mut command = tokio::process::Command::new(schemathesis);
    command
        .arg("run")
        .arg(format!("{}/api/v1/openapi.json", daemon.base_url))
        .arg("--header")
        .arg(format!("Authorization: Bearer {}", prepared.token))
        .args(["--checks", "all", "--exclude-checks", EXCLUDED_CHECK])
        .args(["--max-examples", &max_examples.to_string()])
        .args(["--seed", &seed.to_string()])
        // One worker: the same seed then sends the same requests, so a CI
        // run is repeatable.
        .args(["--workers", "1", "--request-timeout", "10"])
        .args(["--report", "json", "--report-json-path"])
        .arg(&report_path)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(seconds) = seconds {
        command.args(["--max-time", &seconds.to_string()]);
    }
    // schemathesis's own account goes to the terminal; its verdict is read
    // from the JSON report.
    let status = command.status().await.context("running schemathesis")?;
    let malformed = malformed(&daemon.base_url, &prepared.token).await?;
    daemon.kill().await?;
    prepared.pool.close().await;
    let report: Value = serde_json::from_slice(
        &std::fs::read(&report_path)
            .with_context(|| format!("schemathesis ({status}) wrote no report"))?,
    )?;
    let _ = std::fs::remove_file(&report_path);
    Ok((report, malformed, prepared.environment))
}

/// What the report says, in the drill's terms.
struct Verdict {
    tested: u64,
    generated: u64,
    /// (code, title, count, operations) of each kind of failure.
    failures: Vec<(String, String, u64, String)>,
    errors: usize,
}

impl Verdict {
    fn of(report: &Value) -> Self {
        let failures = report["failures"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                let operations: Vec<&str> = f["operations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                (
                    f["code"].as_str().unwrap_or_default().to_owned(),
                    f["title"].as_str().unwrap_or_default().to_owned(),
                    f["count"].as_u64().unwrap_or_default(),
                    operations.join(", "),
                )
            })
            .collect();
        Self {
            tested: report["operations"]["tested"].as_u64().unwrap_or_default(),
            generated: report["test_cases"]["generated"]
                .as_u64()
                .unwrap_or_default(),
            failures,
            errors: report["errors"].as_array().map_or(0, Vec::len),
        }
    }
}

fn render(report: &Value, verdict: &Verdict, environment: &str) -> String {
    use std::fmt::Write as _;
    let mut out = titled_header("memd drill fuzz", environment);
    let strings = |v: &Value| -> String {
        let list: Vec<&str> = v
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if list.is_empty() {
            "none".into()
        } else {
            list.join(", ")
        }
    };
    let _ = write!(
        out,
        "\n{SCHEMATHESIS} (installed by the drill into a virtualenv) runs every phase (examples, coverage, fuzzing, \
         stateful) against `memd serve` on a scratch database, from `/api/v1/openapi.json`, with an admin token, \
         checks `all` but `{EXCLUDED_CHECK}` (a 400 for a request the document allows but memd's rules refuse, such \
         as a `tree_size` past the log's end, is counted as a warning, not a fault). {:.0} s.\n\n\
         | operations tested | test cases generated | failures | errors |\n|---:|---:|---:|---:|\n\
         | {} | {} | {} | {} |\n",
        report["running_time"].as_f64().unwrap_or_default(),
        verdict.tested,
        verdict.generated,
        verdict.failures.iter().map(|f| f.2).sum::<u64>(),
        verdict.errors,
    );
    if !verdict.failures.is_empty() {
        let _ = write!(
            out,
            "\n| check | failure | count | operations |\n|---|---|---:|---|\n"
        );
        for (code, title, count, operations) in &verdict.failures {
            let _ = writeln!(out, "| {code} | {title} | {count} | {operations} |");
        }
    }
    let _ = write!(
        out,
        "\nWarnings: operations that mostly refused generated requests (a rule the document does not state): {}; \
         operations that found nothing to read (no link in the document leads to their ids): {}.\n",
        strings(&report["warnings"]["validation_mismatch"]),
        strings(&report["warnings"]["missing_test_data"]),
    );
    out
}
