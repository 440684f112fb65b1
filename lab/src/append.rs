//! `memd-bench append`: how fast memd appends, next to how fast the same
//! PostgreSQL takes plain INSERTs, measured in one run so the ratio is fair.

use std::{fmt::Write as _, path::Path, sync::Arc, time::Duration};

use anyhow::Context;
use serde_json::{Value, json};

use super::cpu::CpuTimes;
use super::harness::{
    Measurement, ScratchDatabase, drive, environment, report_header, start_daemon,
    start_daemon_without_projections, write_report,
};
use memd::{
    db,
    domain::tenant::{Scope, TenantId},
    read::semantic::SemanticConfig,
    tenants,
};

/// Tenants the multi-tenant scenarios spread their writers over.
const TENANTS: usize = 8;

struct Row {
    scenario: String,
    writers: usize,
    per_request: usize,
    m: Measurement,
    /// CPU used during the scenario: this process (the bench's clients and,
    /// for memd's scenarios, the daemon) and PostgreSQL's processes.
    cpu: Option<CpuTimes>,
}

impl Row {
    /// CPU per event in µs: (this process, PostgreSQL).
    fn cpu_per_event_us(&self) -> Option<(f64, Option<f64>)> {
        let cpu = self.cpu?;
        let events = self.m.events.max(1) as f64;
        let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / events;
        Some((per(cpu.memd), cpu.postgres.map(per)))
    }
}

pub async fn run(
    database_url: &str,
    duration: Duration,
    batch: usize,
    semantic: SemanticConfig,
    projections: bool,
    out: &Path,
) -> anyhow::Result<()> {
    let scratch = ScratchDatabase::create(database_url, "memd_bench").await?;
    let embedder = semantic.embedder.clone();
    let result = measure(&scratch, duration, batch, semantic, projections).await;
    scratch.drop_now().await?;
    let (rows, environment) = result?;
    super::charts::lines(
        &super::charts::path_beside(out, ""),
        "Appends: events/s by concurrent writers (dashed: raw PostgreSQL INSERTs)",
        &super::charts::Axis::log("concurrent writers"),
        &super::charts::Axis::log("events/s"),
        &super::charts::grouped(
            rows.iter()
                .filter(|row| !row.scenario.starts_with("floor"))
                .map(|row| {
                    (
                        row.scenario.clone(),
                        row.writers as f64,
                        row.m.events_per_second(),
                    )
                }),
            |name| name.starts_with("raw"),
        ),
    )?;
    let report = render(
        &rows,
        &environment,
        duration,
        batch,
        embedder.as_deref(),
        projections,
    );
    write_report(out, &report)
}

async fn measure(
    scratch: &ScratchDatabase,
    duration: Duration,
    batch: usize,
    semantic: SemanticConfig,
    projections: bool,
) -> anyhow::Result<(Vec<Row>, String)> {
    let pool = db::connect(scratch.options.clone(), 48).await?;
    db::migrate(&pool).await?;
    let environment = environment(&pool).await?;
    let mut tokens = Vec::new();
    for index in 0..TENANTS {
        let tenant = TenantId::parse(&format!("bench-{index}")).expect("valid tenant id");
        tokens.push(
            tenants::create_tenant(&pool, &tenant, Scope::Write)
                .await?
                .expose()
                .to_string(),
        );
    }
    let tokens = Arc::new(tokens);
    sqlx::query("CREATE TABLE bench_raw (id BIGSERIAL PRIMARY KEY, tenant TEXT NOT NULL, body JSONB NOT NULL)")
        .execute(&pool)
        .await?;

    let daemon = if projections {
        start_daemon(pool.clone(), semantic).await?
    } else {
        start_daemon_without_projections(pool.clone(), semantic).await?
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .context("building the HTTP client")?;
    let url = Arc::new(format!("{}/api/v1/events", daemon.base_url));
    warm_up(&pool, &client, &url, &tokens, projections).await?;

    let mut rows = Vec::new();
    // Each scenario's CPU, from the end of the one before to its last
    // answer (scenarios run back to back, so projection a scenario leaves
    // unfinished counts in the next): with two cores shared by everything,
    // what a path costs in CPU is steadier than its rate.
    let mut cpu_before = CpuTimes::now();
    let mut record = |scenario: &str, writers: usize, per_request: usize, m: Measurement| {
        let cpu_after = CpuTimes::now();
        let cpu = cpu_after
            .zip(cpu_before)
            .map(|(after, before)| after.since(&before));
        cpu_before = CpuTimes::now();
        let row = Row {
            scenario: scenario.to_string(),
            writers,
            per_request,
            m,
            cpu,
        };
        let (own, postgres) = row.cpu_per_event_us().unwrap_or((0.0, None));
        eprintln!(
            "{scenario:<44} writers={writers:<3} {:>9.0} events/s  p50 {:.2} ms  p95 {:.2} ms  errors {}  CPU/event {own:.0} µs + PostgreSQL {:.0} µs",
            row.m.events_per_second(),
            row.m.percentile_ms(50.0),
            row.m.percentile_ms(95.0),
            row.m.errors,
            postgres.unwrap_or(0.0),
        );
        rows.push(row);
    };

    // Raw PostgreSQL: the ceiling memd is compared with.
    for writers in [1, 8, 32] {
        let pool = pool.clone();
        let m = drive(writers, duration, 1, move |writer, i| {
            let pool = pool.clone();
            async move {
                sqlx::query("INSERT INTO bench_raw (tenant, body) VALUES ($1, $2)")
                    .bind(format!("bench-{}", writer % TENANTS))
                    .bind(payload(writer, i)["content"].clone())
                    .execute(&pool)
                    .await?;
                Ok(())
            }
        })
        .await;
        record("raw INSERT, one row per transaction", writers, 1, m);
    }
    for writers in [1, 8] {
        let pool = pool.clone();
        let m = drive(writers, duration, batch, move |writer, i| {
            let pool = pool.clone();
            async move {
                let bodies: Vec<Value> = (0..batch).map(|k| payload(writer, i * batch as u64 + k as u64)["content"].clone()).collect();
                sqlx::query("INSERT INTO bench_raw (tenant, body) SELECT $1, b FROM unnest($2::jsonb[]) AS b")
                    .bind(format!("bench-{}", writer % TENANTS))
                    .bind(&bodies)
                    .execute(&pool)
                    .await?;
                Ok(())
            }
        })
        .await;
        record("raw INSERT, multi-row", writers, batch, m);
    }

    // What storing the log's rows costs PostgreSQL alone, in batches
    // (`FLOOR_LOG_ROWS`): measured first, beside the raw batches, so that
    // the WAL and dirty pages of its rows weigh on the raw scenarios as
    // the raw batches' own do, not on memd's single appends.
    let insert = Arc::new(log_row_insert(&pool).await?);
    let m = {
        let (pool, insert) = (pool.clone(), insert.clone());
        drive(1, duration, batch, move |_, i| {
            let (pool, insert) = (pool.clone(), insert.clone());
            // Past any `seq` the single rows below reach.
            let first = 1_000_000_000 + i * batch as u64;
            async move { insert.execute(&pool, first, batch).await }
        })
        .await
    };
    record(FLOOR_LOG_ROWS, 1, batch, m);

    // The floor of one writer's single append: what no append over HTTP
    // can avoid, measured alone in the same run (see `FLOOR_HTTP`).
    let m = {
        let (client, url) = (
            client.clone(),
            Arc::new(format!("{}/healthz", daemon.base_url)),
        );
        drive(1, duration, 1, move |_, _| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                client.get(url.as_str()).send().await?.error_for_status()?;
                Ok(())
            }
        })
        .await
    };
    record(FLOOR_HTTP, 1, 1, m);
    let m = {
        let pool = pool.clone();
        drive(1, duration, 1, move |_, i| {
            let (pool, insert) = (pool.clone(), insert.clone());
            async move { insert.execute(&pool, i + 1, 1).await }
        })
        .await
    };
    record(FLOOR_LOG_ROW, 1, 1, m);

    // memd over HTTP, single events.
    let cases: [(&str, usize, usize); 5] = [
        ("memd single append, one tenant", 1, 1),
        ("memd single append, one tenant", 8, 1),
        ("memd single append, 8 tenants", 8, TENANTS),
        ("memd single append, one tenant", 32, 1),
        ("memd single append, 8 tenants", 32, TENANTS),
    ];
    for (scenario, writers, tenant_count) in cases {
        let (client, url, tokens) = (client.clone(), url.clone(), tokens.clone());
        let m = drive(writers, duration, 1, move |writer, i| {
            let (client, url, tokens) = (client.clone(), url.clone(), tokens.clone());
            async move {
                post(
                    &client,
                    &url,
                    &tokens[writer % tenant_count],
                    &payload(writer, i),
                )
                .await
            }
        })
        .await;
        record(scenario, writers, 1, m);
    }

    // memd over HTTP, batches.
    let cases: [(&str, usize, usize); 3] = [
        ("memd batched append, one tenant", 1, 1),
        ("memd batched append, 8 tenants", 8, TENANTS),
        ("memd batched append, 8 tenants", 32, TENANTS),
    ];
    for (scenario, writers, tenant_count) in cases {
        let (client, url, tokens) = (client.clone(), url.clone(), tokens.clone());
        let m = drive(writers, duration, batch, move |writer, i| {
            let (client, url, tokens) = (client.clone(), url.clone(), tokens.clone());
            async move {
                let events: Vec<Value> = (0..batch)
                    .map(|k| payload(writer, i * batch as u64 + k as u64))
                    .collect();
                post(
                    &client,
                    &url,
                    &tokens[writer % tenant_count],
                    &json!({ "events": events }),
                )
                .await
            }
        })
        .await;
        record(scenario, writers, batch, m);
    }

    daemon.stop().await?;
    pool.close().await;
    Ok((rows, environment))
}

/// A request to the daemon that touches no database (`GET /healthz`): the
/// HTTP round trip every append also makes, on the same client.
const FLOOR_HTTP: &str = "floor: HTTP round trip, no database (GET /healthz)";
/// A raw INSERT of one of the log's own rows into a copy of `events` with
/// its indexes, constraints and foreign key: what storing an event costs
/// PostgreSQL before memd adds anything.
const FLOOR_LOG_ROW: &str = "floor: raw INSERT of a log row, the log's indexes";

/// The log's rows alone, `--batch` per statement, one writer: what a
/// batched append's storage costs PostgreSQL before memd adds anything.
/// The rows repeat one row's values (but `seq` and `event_id`), so their
/// contents are parsed once per statement, not once per row: this floor
/// is, if anything, above what batches of distinct events could reach.
const FLOOR_LOG_ROWS: &str = "floor: raw multi-row INSERT of log rows, the log's indexes";

/// One warm-up event of the first tenant, stored again by each execution
/// into `bench_log`, a copy of `events` (same columns, domains, indexes,
/// constraints and foreign key to `tenants`) under new `seq`s and
/// `event_id`s. The values are bound as text and cast by PostgreSQL, as
/// memd's append statement has its contents and arrays parsed there too.
struct LogRowInsert {
    /// One row, its values' parameters in `VALUES`.
    one: String,
    /// As many rows as the last parameter says, `seq` and `event_id`
    /// counting up from the ones bound.
    many: String,
    /// Every column's text but the `seq` and `event_id` each execution sets.
    values: Vec<Option<String>>,
    seq_at: usize,
    event_id_at: usize,
}

async fn log_row_insert(pool: &sqlx::PgPool) -> anyhow::Result<LogRowInsert> {
    sqlx::query("CREATE TABLE bench_log (LIKE events INCLUDING ALL)")
        .execute(pool)
        .await?;
    sqlx::query("ALTER TABLE bench_log ADD FOREIGN KEY (tenant_id) REFERENCES tenants (tenant_id)")
        .execute(pool)
        .await?;
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
          WHERE attrelid = 'events'::regclass AND attnum > 0 AND NOT attisdropped
          ORDER BY attnum",
    )
    .fetch_all(pool)
    .await?;
    let position = |name: &str| {
        columns
            .iter()
            .position(|(column, _)| column == name)
            .with_context(|| format!("events has no column {name}"))
    };
    let (seq_at, event_id_at) = (position("seq")?, position("event_id")?);
    let names: Vec<&str> = columns.iter().map(|(name, _)| name.as_str()).collect();
    let as_text: Vec<String> = names.iter().map(|name| format!("{name}::text")).collect();
    let values: Vec<Option<String>> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT ARRAY[{}] FROM events WHERE tenant_id = 'bench-0' ORDER BY seq LIMIT 1",
        as_text.join(", ")
    )))
    .fetch_one(pool)
    .await?;
    let casts: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, (_, ty))| format!("${}::{ty}", i + 1))
        .collect();
    let counting: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, (_, ty))| match i {
            _ if i == seq_at => format!("(${}::bigint + g)::{ty}", i + 1),
            _ if i == event_id_at => format!("(${}::text || '-' || g)::{ty}", i + 1),
            _ => format!("${}::{ty}", i + 1),
        })
        .collect();
    Ok(LogRowInsert {
        one: format!(
            "INSERT INTO bench_log ({}) VALUES ({})",
            names.join(", "),
            casts.join(", ")
        ),
        many: format!(
            "INSERT INTO bench_log ({}) SELECT {} FROM generate_series(0, ${} - 1) AS g",
            names.join(", "),
            counting.join(", "),
            columns.len() + 1
        ),
        values,
        seq_at,
        event_id_at,
    })
}

impl LogRowInsert {
    /// Stores `rows` rows, with `seq`s from `first` on.
    async fn execute(&self, pool: &sqlx::PgPool, first: u64, rows: usize) -> anyhow::Result<()> {
        let sql = if rows == 1 { &self.one } else { &self.many };
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()));
        for (at, value) in self.values.iter().enumerate() {
            query = if at == self.seq_at {
                query.bind(first.to_string())
            } else if at == self.event_id_at {
                query.bind(format!("bench-log-{first}"))
            } else {
                query.bind(value.as_deref())
            };
        }
        if rows > 1 {
            query = query.bind(i64::try_from(rows)?);
        }
        query.execute(pool).await?;
        Ok(())
    }
}

/// Events each tenant holds before the scenarios start.
const WARM_UP_EVENTS: usize = 200;

/// Gives each tenant a short history, lets projection catch up and has
/// PostgreSQL analyze the tables: the state of a daemon that has been
/// running for a while. Measured from a freshly created database instead,
/// every connection keeps the plans it made in its first milliseconds for
/// tables that were empty then, and the scenarios' tables grow by tens of
/// thousands of rows in a minute, before autovacuum's first ANALYZE could
/// have them planned again: in a live projection step, reading six events
/// of a tenant's log took 0.2 ms through a plan that scanned the tenant's
/// whole log by another index, against 0.05 ms through the primary key
/// (`lab/results/2026-12-04-warm-start/`).
async fn warm_up(
    pool: &sqlx::PgPool,
    client: &reqwest::Client,
    url: &str,
    tokens: &[String],
    projections: bool,
) -> anyhow::Result<()> {
    for (writer, token) in tokens.iter().enumerate() {
        let events: Vec<Value> = (0..WARM_UP_EVENTS as u64)
            .map(|i| payload(writer, i))
            .collect();
        post(client, url, token, &json!({ "events": events })).await?;
    }
    if projections {
        // Also analyzes, once every projection has caught up.
        super::harness::wait_projected(pool).await
    } else {
        super::harness::analyze(pool).await
    }
}

/// A realistic message event: a couple of hundred bytes of text, tags, a session.
fn payload(writer: usize, i: u64) -> Value {
    json!({
        "session_id": format!("bench-session-{writer}"),
        "channel": "private",
        "actor": {"type": "agent", "id": format!("agent-{writer}")},
        "kind": "message",
        "tags": ["bench", "topic:throughput"],
        "content": {"text": format!(
            "Benchmark message {i} from writer {writer}: the build on main failed in the migrations step \
             because the events table gained a column; rerun after applying 20261122000001_event_log.sql."
        )},
    })
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    body: &Value,
) -> anyhow::Result<()> {
    let response = client
        .post(url)
        .bearer_auth(token)
        .json(body)
        .send()
        .await?;
    let status = response.status();
    if !status.is_success() {
        anyhow::bail!(
            "HTTP {status}: {}",
            response.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

fn find<'a>(rows: &'a [Row], scenario: &str, writers: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.writers == writers)
}

fn render(
    rows: &[Row],
    environment: &str,
    duration: Duration,
    batch: usize,
    embedder: Option<&str>,
    projections: bool,
) -> String {
    let mut out = report_header("append", environment);
    let _ = writeln!(
        out,
        "Each scenario runs {:.1} s; batched scenarios send {batch} events per request. Before them each of the {TENANTS} tenants got {WARM_UP_EVENTS} events, projected, and the tables were analyzed (a running daemon's state, not an empty database's). Latency is per request (HTTP round trip for memd, statement for raw). The daemon's embedder: {} (its embedding worker runs beside the appends). {}\n",
        duration.as_secs_f64(),
        embedder.unwrap_or("none"),
        if projections {
            "Its projectors run beside the appends, as in production."
        } else {
            "**Its projectors are off** (`--without-projections`): this shows what they cost the appends."
        }
    );
    let _ = writeln!(
        out,
        "| scenario | writers | events/request | requests | events/s | p50 ms | p95 ms | p99 ms | errors | CPU µs/event: bench process | CPU µs/event: PostgreSQL |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for row in rows {
        let m = &row.m;
        let (own, postgres) = match row.cpu_per_event_us() {
            Some((own, postgres)) => (
                format!("{own:.0}"),
                postgres.map_or("-".to_owned(), |p| format!("{p:.0}")),
            ),
            None => ("-".to_owned(), "-".to_owned()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {own} | {postgres} |",
            row.scenario,
            row.writers,
            row.per_request,
            m.operations,
            m.events_per_second(),
            m.percentile_ms(50.0),
            m.percentile_ms(95.0),
            m.percentile_ms(99.0),
            m.errors
        );
    }
    let _ = writeln!(out, "\n## memd / raw PostgreSQL\n");
    let ratios = [
        (
            "single, 1 writer",
            "memd single append, one tenant",
            1,
            "raw INSERT, one row per transaction",
            1,
        ),
        (
            "single, 8 writers, one tenant",
            "memd single append, one tenant",
            8,
            "raw INSERT, one row per transaction",
            8,
        ),
        (
            "single, 8 writers, 8 tenants",
            "memd single append, 8 tenants",
            8,
            "raw INSERT, one row per transaction",
            8,
        ),
        (
            "single, 32 writers, 8 tenants",
            "memd single append, 8 tenants",
            32,
            "raw INSERT, one row per transaction",
            32,
        ),
        (
            "batched, 1 writer",
            "memd batched append, one tenant",
            1,
            "raw INSERT, multi-row",
            1,
        ),
        (
            "batched, 8 writers, 8 tenants",
            "memd batched append, 8 tenants",
            8,
            "raw INSERT, multi-row",
            8,
        ),
    ];
    let _ = writeln!(
        out,
        "| case | memd events/s | raw events/s | ratio | memd CPU µs/event | raw CPU µs/event |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    // All CPU of the machine's two processes that matter: the bench
    // process (clients, and memd's daemon) and PostgreSQL.
    let total_cpu = |row: &Row| match row.cpu_per_event_us() {
        Some((own, Some(postgres))) => format!("{:.0}", own + postgres),
        _ => "-".to_owned(),
    };
    // Above: one writer's append cannot run faster than the HTTP round
    // trip and the log row's INSERT one after the other, both measured
    // alone (each at 1 / its rate per operation).
    if let (Some(http), Some(row), Some(raw)) = (
        find(rows, FLOOR_HTTP, 1),
        find(rows, FLOOR_LOG_ROW, 1),
        find(rows, "raw INSERT, one row per transaction", 1),
    ) {
        let floor = 1.0 / (1.0 / http.m.events_per_second() + 1.0 / row.m.events_per_second());
        let _ = writeln!(
            out,
            "| single, 1 writer, at most: the two floor rows one after the other | {floor:.0} | {:.0} | {:.2} | - | {} |",
            raw.m.events_per_second(),
            floor / raw.m.events_per_second(),
            total_cpu(raw),
        );
    }
    if let (Some(rows_alone), Some(raw)) = (
        find(rows, FLOOR_LOG_ROWS, 1),
        find(rows, "raw INSERT, multi-row", 1),
    ) {
        let _ = writeln!(
            out,
            "| batched, 1 writer, at most: the log's rows alone, {} per statement | {:.0} | {:.0} | {:.2} | {} | {} |",
            rows_alone.per_request,
            rows_alone.m.events_per_second(),
            raw.m.events_per_second(),
            rows_alone.m.events_per_second() / raw.m.events_per_second(),
            total_cpu(rows_alone),
            total_cpu(raw),
        );
    }
    for (label, memd, mw, raw, rw) in ratios {
        if let (Some(a), Some(b)) = (find(rows, memd, mw), find(rows, raw, rw)) {
            let _ = writeln!(
                out,
                "| {label} | {:.0} | {:.0} | {:.2} | {} | {} |",
                a.m.events_per_second(),
                b.m.events_per_second(),
                a.m.events_per_second() / b.m.events_per_second(),
                total_cpu(a),
                total_cpu(b),
            );
        }
    }
    out
}
