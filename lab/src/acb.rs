//! `memd-bench acb`: how long bundles take, over HTTP against the real
//! daemon, as one tenant's history grows.
//!
//! At each size (each loaded on top of the previous, then fully projected):
//! the fast path (`intent: continue`, views, tasks, decisions and the
//! recent window) and the retrieval path (a question, full-text retrieval),
//! with questions that come back and with every question new, each with 1
//! and with 32 concurrent clients; and the first bundle after a
//! restart (a new daemon with a new connection pool, warmed up as `memd
//! serve` warms up before it serves), repeated.

use std::{fmt::Write as _, path::Path, time::Duration};

use memd_core::seal::Keyring;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    cpu::CpuTimes,
    harness::{
        Measurement, ScratchDatabase, bench_database, drive, environment, percentile,
        report_header, start_daemon, wait_embedded, wait_projected, write_report,
    },
    histories::{History, chat_message, load},
};
use memd::{
    db,
    domain::{
        event::Channel,
        tenant::{Scope, TenantId},
    },
    read::{
        policy::Policy,
        privacy::Visibility,
        retrieve::{self, Scope as RetrievalScope},
        semantic::SemanticConfig,
    },
    tenants,
};

pub struct Options {
    pub sizes: Vec<u64>,
    pub seconds: f64,
    pub restarts: usize,
    pub max_tokens: u32,
    /// A database kept between runs, instead of a scratch one.
    pub keep_database: Option<String>,
    /// The daemon's embedder (retrieval is hybrid unless none).
    pub semantic: SemanticConfig,
}

const TENANT: &str = "acb-bench";
/// The scenario that measures PostgreSQL's part alone.
const CANDIDATES_ALONE: &str = "retrieval candidate statements alone (PostgreSQL)";

/// Distinct questions the candidate statement is measured with (the
/// retrieval path's, by index).
const QUESTIONS: u64 = 1_000;

/// Questions about the chat history (accounts, exports, jobs, page sizes).
pub(super) fn question(i: u64) -> String {
    match i % 5 {
        0 => format!(
            "why did the nightly export fail for account {}?",
            i * 7 % 311
        ),
        1 => "what page size do we use for exports?".to_owned(),
        2 => format!(
            "which jobs timed out while reading account {}?",
            i * 13 % 311
        ),
        3 => format!("status of job export-{}", i * 37 % 10_000),
        _ => "how many retries before an export gives up, and what was decided?".to_owned(),
    }
}

struct Row {
    size: u64,
    scenario: &'static str,
    clients: usize,
    m: Measurement,
    seen: Seen,
    /// CPU the scenario used, of this process and of PostgreSQL.
    cpu: Option<CpuTimes>,
}

/// What the bench reads of a bundle. Its clients skip the rest as they
/// parse (the sections and omissions, most of the bytes), as a load
/// generator should: a JSON tree of every bundle cost the clients as much
/// CPU as the daemon spent serialising it, on the two cores the daemon and
/// PostgreSQL share (a fifth of the process's samples on the fast path).
#[derive(Deserialize)]
struct Answer {
    token_used_est: f64,
    provenance: AnswerProvenance,
}

#[derive(Deserialize)]
struct AnswerProvenance {
    candidate_pool_size: f64,
    cache: String,
    semantic: AnswerSemantic,
    stages_ms: AnswerStages,
    diagnostics: AnswerDiagnostics,
}

#[derive(Deserialize)]
struct AnswerSemantic {
    used: bool,
    reason: Option<String>,
}

#[derive(Deserialize)]
struct AnswerDiagnostics {
    question_embedded: bool,
    rows_read: f64,
}

#[derive(Deserialize)]
struct AnswerStages {
    prepare: f64,
    candidates: f64,
    rank: f64,
    rerank: f64,
    choose: f64,
    pack: f64,
    render: f64,
}

/// The stages of `provenance.stages_ms`, in order.
const STAGES: [&str; 7] = [
    "prepare",
    "candidates",
    "rank",
    "rerank",
    "choose",
    "pack",
    "render",
];

/// What the bundles of one scenario said of themselves, summed.
#[derive(Default, Clone)]
struct Seen {
    bundles: usize,
    /// Bundles whose retrieval used vector candidates.
    semantic: usize,
    tokens: f64,
    pool: f64,
    stages_ms: [f64; STAGES.len()],
    /// Bundles whose question the model embedded (not from the cache).
    embedded: usize,
    /// Rows of chunks found by meaning read from PostgreSQL, summed.
    rows_read: f64,
}

impl Seen {
    fn add(&mut self, acb: &Answer) {
        self.bundles += 1;
        let (provenance, semantic) = (&acb.provenance, &acb.provenance.semantic);
        self.semantic += usize::from(semantic.used);
        self.embedded += usize::from(provenance.diagnostics.question_embedded);
        self.rows_read += provenance.diagnostics.rows_read;
        self.tokens += acb.token_used_est;
        self.pool += provenance.candidate_pool_size;
        let stages = &provenance.stages_ms;
        let times = [
            stages.prepare,
            stages.candidates,
            stages.rank,
            stages.rerank,
            stages.choose,
            stages.pack,
            stages.render,
        ];
        for (sum, ms) in self.stages_ms.iter_mut().zip(times) {
            *sum += ms;
        }
    }

    fn mean(&self, sum: f64) -> f64 {
        sum / self.bundles.max(1) as f64
    }
}

pub async fn run(database_url: &str, options: Options, out: &Path) -> anyhow::Result<()> {
    let (scratch, kept) = bench_database(database_url, options.keep_database.as_deref()).await?;
    let result = measure(&scratch, &options).await;
    if !kept {
        scratch.drop_now().await?;
    }
    let (rows, environment) = result?;
    let clients = |n: usize| {
        if n == 1 {
            "1 client".to_owned()
        } else {
            format!("{n} clients")
        }
    };
    super::charts::lines(
        &super::charts::path_beside(out, ""),
        "Bundles: p95 latency by history size (dashed: PostgreSQL alone, the candidate statements)",
        &super::charts::Axis::log("events in the tenant's history"),
        &super::charts::Axis::log("p95 latency, ms"),
        &super::charts::grouped(
            rows.iter().map(|row| {
                (
                    format!("{}, {}", row.scenario, clients(row.clients)),
                    row.size as f64,
                    row.m.percentile_ms(95.0),
                )
            }),
            |name| name.starts_with(CANDIDATES_ALONE),
        ),
    )?;
    write_report(out, &render(&rows, &options, &environment))
}

async fn measure(
    scratch: &ScratchDatabase,
    options: &Options,
) -> anyhow::Result<(Vec<Row>, String)> {
    let pool = db::connect(scratch.options.clone(), 40).await?;
    db::migrate(&pool).await?;
    let environment = environment(&pool).await?;
    let tenant = TenantId::parse(TENANT).expect("valid tenant id");
    // A kept database may hold the history already, up to some size.
    let (token, mut loaded) = match tenants::issue_token(&pool, &tenant, Scope::Admin, None).await?
    {
        Some(token) => {
            let history: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM public.events
                  WHERE tenant_id = $1 AND session_id <> 'views' AND NOT starts_with(session_id, $2)",
            )
            .bind(TENANT)
            .bind(TURN_SESSIONS)
            .fetch_one(&pool)
            .await?;
            (token, history as u64)
        }
        None => (
            tenants::create_tenant(&pool, &tenant, Scope::Admin).await?,
            0,
        ),
    };
    let token = token.expose().to_string();
    let mut rows = Vec::new();
    for &size in &options.sizes {
        anyhow::ensure!(
            size >= loaded,
            "the kept database holds {loaded} events, more than the size {size}"
        );
        // The daemon projects while the history loads.
        let daemon = start_daemon(pool.clone(), options.semantic.clone()).await?;
        if loaded == 0 {
            views(&daemon.base_url, &token).await?;
        }
        load(&pool, &tenant, History::Chat, loaded, size).await?;
        loaded = size;
        wait_projected(&pool).await?;
        let embedding = std::time::Instant::now();
        wait_embedded(&pool, options.semantic.embedder.as_deref()).await?;
        eprintln!(
            "{size} events loaded and projected; embedded {:.0} s later",
            embedding.elapsed().as_secs_f64()
        );
        let session = format!("session-{}", (size - 1) / 200);
        if options.semantic.embedder.is_some() {
            let waited = vectors_loaded(&daemon.base_url, &token, &session, options).await?;
            eprintln!("{size} vector index loaded {waited:.1} s after the first bundle");
        }
        for clients in [1, 32] {
            let before = CpuTimes::now();
            let (m, pool_size) = candidate_statements(&pool, &tenant, clients, options).await?;
            let cpu = used_since(before);
            eprintln!(
                "{size} candidate statement x{clients}: p50 {:.1} ms, p95 {:.1} ms",
                m.percentile_ms(50.0),
                m.percentile_ms(95.0)
            );
            rows.push(Row {
                size,
                scenario: CANDIDATES_ALONE,
                clients,
                m,
                seen: Seen {
                    bundles: 1,
                    pool: pool_size,
                    ..Seen::default()
                },
                cpu,
            });
        }
        for (scenario, ask) in [
            ("fast path", Ask::Continue),
            ("retrieval path", Ask::Question),
            ("retrieval path, every question new", Ask::NewQuestion),
            (TURN, Ask::Turn),
        ] {
            for clients in [1, 32] {
                let before = CpuTimes::now();
                let (m, seen) =
                    bundles(&daemon.base_url, &token, &session, ask, clients, options).await;
                let cpu = used_since(before);
                eprintln!(
                    "{size} {scenario} x{clients}: p50 {:.1} ms, p95 {:.1} ms",
                    m.percentile_ms(50.0),
                    m.percentile_ms(95.0)
                );
                rows.push(Row {
                    size,
                    scenario,
                    clients,
                    m,
                    seen,
                    cpu,
                });
            }
        }
        daemon.stop().await?;
        rows.push(cold(scratch, &token, &session, size, options).await?);
    }
    pool.close().await;
    Ok((rows, environment))
}

async fn views(base: &str, token: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    for (view, text) in [
        (
            "identity",
            "You are the on-call assistant of the billing team.",
        ),
        (
            "rules",
            "Never rerun an export during business hours. Page sizes follow the ledger decision.",
        ),
    ] {
        client
            .post(format!("{base}/api/v1/events"))
            .bearer_auth(token)
            .json(&json!({"session_id": "views", "channel": "private",
                          "actor": {"type": "human", "id": "lead"}, "kind": "view_update",
                          "content": {"view": view, "text": text}}))
            .send()
            .await?
            .error_for_status()?;
    }
    Ok(())
}

/// What the clients of a scenario ask for.
#[derive(Debug, Clone, Copy)]
enum Ask {
    /// `intent: continue`: the fast path.
    Continue,
    /// [`question`]s: two of its five kinds are one text each and two
    /// cycle through 311 accounts, so most come back, and their vectors
    /// from the daemon's cache.
    Question,
    /// The same questions, each made new by a ticket number no other
    /// request of the run carries, so that every one is embedded: what an
    /// agent's own questions cost. The number is a word the history does
    /// not hold (its counts run to 10,000; these start at 10⁸).
    NewQuestion,
    /// An agent's turn: it appends a message to its own session, then asks
    /// a [`question`] in that session. The message advances the tenant's
    /// projections, so the daemon's cached state of the tenant is read
    /// again, the recent window holds an event not projected yet, and the
    /// embeddings projection has a chunk to embed: a live agent's every
    /// bundle. Latency is the whole turn (both requests).
    Turn,
}

fn body(session: &str, ask: Ask, i: u64, max_tokens: u32) -> Value {
    let query = match ask {
        Ask::Continue => {
            return json!({"session_id": session, "agent_id": "bench", "intent": "continue",
                          "query_text": "continue", "max_tokens": max_tokens});
        }
        Ask::Question | Ask::Turn => question(i),
        Ask::NewQuestion => format!("{} (ticket {})", question(i), NEW_TICKETS + i),
    };
    json!({"session_id": session, "agent_id": "bench", "intent": "question",
           "query_text": query, "max_tokens": max_tokens})
}

/// The scenario of an agent's turn: what every bundle of a live agent
/// pays that the read-only scenarios do not.
const TURN: &str = "agent turn (append a message, then a retrieval bundle)";

/// The session of client `writer`'s turns: each its own, as each agent of
/// a tenant keeps its own conversation. A kept database grows by these
/// sessions' events; they are not counted as the loaded history.
fn turn_session(writer: usize) -> String {
    format!("{TURN_SESSIONS}{writer}")
}

const TURN_SESSIONS: &str = "turn-";

/// The message an agent appends at the start of turn `i`: a message of the
/// history's own kind and words (its numbers past the history's), so that
/// the tenant's newest chunks still speak as its history does. Messages in
/// other words would turn the history's everyday terms rare in the sample
/// [`retrieve::candidate_pool`] tells common terms by, which is another
/// measurement (see `lab/results/2026-11-28-agent-turns/`).
fn turn_message(writer: usize, i: u64) -> Value {
    let mut message = chat_message(TURN_NUMBERS + writer as u64 * 1_000_000, i);
    message["session_id"] = json!(turn_session(writer));
    message["agent_id"] = json!("bench");
    message
}

/// Where the numbers in turns' messages start (the history's run to its
/// size).
const TURN_NUMBERS: u64 = 1_000_000_000;

/// Where the ticket numbers of [`Ask::NewQuestion`] start.
const NEW_TICKETS: u64 = 100_000_000;

/// The floor under the retrieval path: the two statements that fetch a
/// bundle's candidate pool (which terms are common, then the pool), for the
/// same questions, run straight on connections of this process by
/// `clients` concurrent tasks (no HTTP, no ranking, no bundle). Also the
/// mean pool size.
async fn candidate_statements(
    pool: &sqlx::PgPool,
    tenant: &TenantId,
    clients: usize,
    options: &Options,
) -> anyhow::Result<(Measurement, f64)> {
    let pool_max = Policy::default().candidate_pool_max as usize;
    // The questions' lexemes, as a bundle finds them.
    let mut questions = Vec::new();
    for i in 0..QUESTIONS {
        let lexemes: Vec<String> = sqlx::query_scalar(
            "SELECT ARRAY(SELECT l FROM unnest(tsvector_to_array(
                      to_tsvector('english', projections.searchable($1)))) AS l LIMIT $2)",
        )
        .bind(question(i))
        .bind(retrieve::MAX_LEXEMES as i64)
        .fetch_one(pool)
        .await?;
        questions.push(lexemes);
    }
    let questions = std::sync::Arc::new(questions);
    let sizes = std::sync::Arc::new(std::sync::Mutex::new((0.0, 0_usize)));
    let m = drive(clients, Duration::from_secs_f64(options.seconds), 1, {
        let (sizes, tenant, pool) = (sizes.clone(), tenant.to_string(), pool.clone());
        move |writer, i| {
            let (pool, questions, sizes, tenant) = (
                pool.clone(),
                questions.clone(),
                sizes.clone(),
                tenant.clone(),
            );
            async move {
                let lexemes = &questions[((writer as u64 * 100_003 + i) % QUESTIONS) as usize];
                let (visibility, scope) =
                    (Visibility::new(Channel::Private), RetrievalScope::default());
                let (_, found) = retrieve::candidate_pool(
                    &pool,
                    &Keyring::none(),
                    &tenant,
                    lexemes,
                    visibility,
                    &scope,
                    pool_max,
                )
                .await?;
                let mut sizes = sizes.lock().expect("lock");
                sizes.0 += found.len() as f64;
                sizes.1 += 1;
                Ok(())
            }
        }
    })
    .await;
    let (total, n) = *sizes.lock().expect("lock");
    Ok((m, total / n.max(1) as f64))
}

/// Bundles from `clients` concurrent clients for the configured time, and
/// what they said of themselves.
async fn bundles(
    base: &str,
    token: &str,
    session: &str,
    ask: Ask,
    clients: usize,
    options: &Options,
) -> (Measurement, Seen) {
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/acb/build");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::default()));
    let max_tokens = options.max_tokens;
    let m = drive(clients, Duration::from_secs_f64(options.seconds), 1, {
        let seen = seen.clone();
        let (token, session) = (token.to_owned(), session.to_owned());
        move |writer, i| {
            let (client, url, token, seen) =
                (client.clone(), url.clone(), token.clone(), seen.clone());
            let mut request = writer as u64 * 100_003 + i;
            if let Ask::NewQuestion = ask {
                // The 1-client run's tickets are not the 32-client run's.
                request += clients as u64 * 10_000_000;
            }
            let turn = matches!(ask, Ask::Turn).then(|| turn_message(writer, i));
            let session = match ask {
                Ask::Turn => turn_session(writer),
                _ => session.clone(),
            };
            let body = body(&session, ask, request, max_tokens);
            let events_url = url.replace("/acb/build", "/events");
            async move {
                if let Some(message) = turn {
                    client
                        .post(&events_url)
                        .bearer_auth(&token)
                        .json(&message)
                        .send()
                        .await?
                        .error_for_status()?;
                }
                let acb: Answer = client
                    .post(&url)
                    .bearer_auth(&token)
                    .json(&body)
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                seen.lock().expect("lock").add(&acb);
                Ok(())
            }
        }
    })
    .await;
    let seen = seen.lock().expect("lock").clone();
    (m, seen)
}

/// Waits until the daemon's bundles use vector candidates: its first
/// retrieval bundle starts loading the tenant's vector index in the
/// background (a million vectors take many seconds), and bundles until then
/// are lexical, which is not what the hybrid scenarios measure. The seconds
/// it took.
async fn vectors_loaded(
    base: &str,
    token: &str,
    session: &str,
    options: &Options,
) -> anyhow::Result<f64> {
    let client = reqwest::Client::new();
    let started = std::time::Instant::now();
    loop {
        let acb: Answer = client
            .post(format!("{base}/api/v1/acb/build"))
            .bearer_auth(token)
            .json(&body(session, Ask::Question, 0, options.max_tokens))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let semantic = &acb.provenance.semantic;
        if semantic.used {
            return Ok(started.elapsed().as_secs_f64());
        }
        let reason = semantic.reason.as_deref().unwrap_or_default();
        anyhow::ensure!(
            reason.contains("loading") && started.elapsed() < Duration::from_secs(1800),
            "bundles do not use vector candidates: {reason}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The first bundle of a freshly started daemon, `restarts` times.
async fn cold(
    scratch: &ScratchDatabase,
    token: &str,
    session: &str,
    size: u64,
    options: &Options,
) -> anyhow::Result<Row> {
    let client = reqwest::Client::new();
    let mut latencies = Vec::new();
    let mut seen = Seen::default();
    let mut state_cached = 0;
    let started = std::time::Instant::now();
    for restart in 0..options.restarts {
        let pool = db::connect(scratch.options.clone(), 16).await?;
        let daemon = start_daemon(pool.clone(), options.semantic.clone()).await?;
        let at = std::time::Instant::now();
        let acb: Answer = client
            .post(format!("{}/api/v1/acb/build", daemon.base_url))
            .bearer_auth(token)
            .json(&body(
                session,
                Ask::Question,
                restart as u64,
                options.max_tokens,
            ))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        latencies.push(at.elapsed());
        seen.add(&acb);
        state_cached += usize::from(acb.provenance.cache == "hit");
        daemon.stop().await?;
        pool.close().await;
    }
    eprintln!(
        "{size} cold: p50 {:.1} ms; {state_cached} of {} found the tenant's state warmed up",
        percentile(&latencies, 50.0).as_secs_f64() * 1e3,
        options.restarts
    );
    Ok(Row {
        size,
        scenario: "cold cache (first bundle after restart, retrieval)",
        clients: 1,
        m: Measurement::from_latencies(latencies, started.elapsed()),
        seen,
        cpu: None,
    })
}

/// The CPU used since `before` was read (`None` without `/proc`).
fn used_since(before: Option<CpuTimes>) -> Option<CpuTimes> {
    CpuTimes::now()
        .zip(before)
        .map(|(now, then)| now.since(&then))
}

fn render(rows: &[Row], options: &Options, environment: &str) -> String {
    let mut out = report_header("acb", environment);
    out.push('\n');
    let _ = writeln!(
        out,
        "Embedder: {} (retrieval is {}; the first bundle after a restart uses lexical candidates while the vector \
         index loads in the background, so before measuring, bundles are asked for until they use vector \
         candidates; *hybrid bundles* counts those that did). \
         One tenant's chat history ({}), loaded up to each size and fully projected and embedded; views identity and rules. \
         Every bundle has `max_tokens` {} and goes over HTTP to the daemon in this process; latency is the whole \
         round trip, measured by the client, which reads only the provenance and token count of each answer (skipping sections and omissions as it parses). Fast path: `intent: continue` in the newest session. Retrieval path: \
         questions about accounts, exports, jobs and decisions, varied per request (most come back: two of five \
         kinds are one text each, two cycle through 311 accounts, so their vectors come from the daemon's cache); \
         *every question new*: the same questions, each with a ticket number no other request of the run carries \
         (a word the history does not hold), so every question is embedded. *{TURN}*: each client, as an agent of the tenant in its \
         own session, appends a message and then asks a question in that session; the append advances the \
         projections, so the daemon reads the tenant's state again, and latency is the whole turn (a kept \
         database grows by these messages, in sessions `{TURN_SESSIONS}N`). Clients send back to back for \
         {:.0} s. Cold cache: a new daemon and connection pool, which warms up before it serves as `memd serve` does \
         (connections and their plans, the recent tenants' state and vector indexes), then its first bundle \
         (retrieval, in a session the warm-up did not read), {} times per size. \
         *Candidate statement alone*: the two statements that fetch a retrieval bundle's candidate pool (which \
         terms are common, then the pool), for the same questions, run straight on connections of the benchmark \
         process (no HTTP, no ranking, no bundle): PostgreSQL's share, the floor under the retrieval path.\n",
        options.semantic.embedder.as_deref().unwrap_or("none"),
        if options.semantic.embedder.is_some() {
            "hybrid"
        } else {
            "lexical"
        },
        History::Chat.describe(),
        options.max_tokens,
        options.seconds,
        options.restarts
    );
    if let Some(name) = &options.keep_database {
        let _ = writeln!(
            out,
            "The history is kept in the database `{name}` between runs (`--keep-database`): what an earlier \
             run loaded, projected and embedded is measured again, not loaded again.\n"
        );
    }
    let _ = writeln!(
        out,
        "| events | scenario | clients | bundles | bundles/s | p50 ms | p95 ms | p99 ms | errors | mean tokens | mean candidate pool | hybrid bundles |"
    );
    let _ = writeln!(
        out,
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {:.0} | {:.0} | {} |",
            row.size,
            row.scenario,
            row.clients,
            row.m.operations,
            row.m.events_per_second(),
            row.m.percentile_ms(50.0),
            row.m.percentile_ms(95.0),
            row.m.percentile_ms(99.0),
            row.m.errors,
            row.seen.mean(row.seen.tokens),
            row.seen.mean(row.seen.pool),
            row.seen.semantic
        );
    }
    let _ = writeln!(
        out,
        "\nWhere a bundle's time went, as the daemon measured it (`provenance.stages_ms`, mean ms per bundle; \
         the rest of the round trip is HTTP and JSON), and what the semantic side did (`provenance.semantic`): \
         *questions embedded*, the share of bundles whose question the model ran for (the others' vectors were \
         cached); *rows read*, the rows of chunks found by meaning read from PostgreSQL per bundle (the others \
         the lexical side had, or the vector index remembered):\n\n\
         | events | scenario | clients | {} | questions embedded | rows read |\n|---:|---|---:|{}---:|---:|",
        STAGES.join(" | "),
        "---:|".repeat(STAGES.len())
    );
    for row in rows.iter().filter(|row| row.scenario != CANDIDATES_ALONE) {
        let stages: Vec<String> = row
            .seen
            .stages_ms
            .iter()
            .map(|sum| format!("{:.2}", row.seen.mean(*sum)))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.2} | {:.1} |",
            row.size,
            row.scenario,
            row.clients,
            stages.join(" | "),
            row.seen.mean(row.seen.embedded as f64),
            row.seen.mean(row.seen.rows_read)
        );
    }
    let _ = writeln!(
        out,
        "\nCPU per bundle (per run of the two statements, for PostgreSQL alone), read from `/proc` over each \
         scenario: *this process* is the daemon with the bench's HTTP clients (for PostgreSQL alone, the \
         statements' client side); *PostgreSQL* is every `postgres` process on the machine. Under 32 clients \
         the two cores are busy, so the bundles a second follow from the sum, and the sum moves less than the \
         rate when the machine's speed changes between runs:\n\n\
         | events | scenario | clients | this process, ms | PostgreSQL, ms | both, ms |\n|---:|---|---:|---:|---:|---:|"
    );
    for row in rows {
        let Some(cpu) = row.cpu else { continue };
        let per = |used: Duration| used.as_secs_f64() * 1e3 / row.m.operations.max(1) as f64;
        let postgres = cpu.postgres.map(per);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} | {} | {} |",
            row.size,
            row.scenario,
            row.clients,
            per(cpu.memd),
            postgres.map_or_else(|| "n/a".to_owned(), |ms| format!("{ms:.2}")),
            postgres.map_or_else(
                || "n/a".to_owned(),
                |ms| format!("{:.2}", ms + per(cpu.memd))
            ),
        );
    }
    out
}
