//! `memd-bench scale`: whether costs stay flat as the log grows. One log
//! spread over several tenants is loaded (and projected) to each of the
//! sizes in turn; at each size, with the daemon in-process: single and
//! batched appends, fast-path and retrieval bundles of one tenant (one
//! client each), then, with the daemon stopped, a rebuild of another
//! tenant's projections and `verify` of its chain.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use sqlx::PgPool;

use super::{
    acb::question,
    harness::{
        Measurement, ScratchDatabase, bench_database, drive, environment, report_header,
        start_daemon, wait_projected, write_report,
    },
    histories::{History, load},
};
use memd::{
    db,
    domain::tenant::{Scope, TenantId},
    read::semantic::SemanticConfig,
    startup::ProjectionConfig,
    tenants,
};

pub struct Options {
    /// Total events of the log at each measurement, ascending.
    pub sizes: Vec<u64>,
    /// The log is spread evenly over this many tenants.
    pub tenants: usize,
    pub seconds: f64,
    pub keep_database: Option<String>,
}

struct Row {
    size: u64,
    /// Events in the log when the bundles were measured: the history, and
    /// the bench's own appends of the sizes before.
    log_events: i64,
    per_tenant: u64,
    single: Measurement,
    batched: Measurement,
    fast: Measurement,
    retrieval: Measurement,
    rebuild: Duration,
    verify: Duration,
    events_bytes: i64,
    chunks_bytes: i64,
}

/// Appends the bench makes go to a tenant of their own: the tenants whose
/// bundles, rebuild and verify are measured hold their history alone.
const APPEND_TENANT: &str = "scale-appends";
const APPEND_SESSION: &str = "appends";
const BATCH: usize = 100;

fn tenant_name(i: usize) -> String {
    format!("scale-{i:02}")
}

pub async fn run(database_url: &str, options: Options, out: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(options.tenants >= 2, "--tenants: at least 2");
    anyhow::ensure!(
        options.sizes.windows(2).all(|w| w[0] < w[1]),
        "--sizes: ascending"
    );
    let (scratch, kept) = bench_database(database_url, options.keep_database.as_deref()).await?;
    let result = measure(&scratch, &options).await;
    if !kept {
        scratch.drop_now().await?;
    }
    let (rows, environment) = result?;
    charts(out, &rows)?;
    write_report(out, &render(&rows, &options, &environment))
}

async fn measure(
    scratch: &ScratchDatabase,
    options: &Options,
) -> anyhow::Result<(Vec<Row>, String)> {
    let pool = db::connect(scratch.options.clone(), 8).await?;
    db::migrate(&pool).await?;
    let environment = environment(&pool).await?;
    let mut tokens = Vec::with_capacity(options.tenants);
    for i in 0..options.tenants {
        let tenant = TenantId::parse(&tenant_name(i)).expect("a valid name");
        let token = match tenants::issue_token(&pool, &tenant, Scope::Admin, None).await? {
            Some(token) => token,
            None => tenants::create_tenant(&pool, &tenant, Scope::Admin).await?,
        };
        tokens.push(token.expose().to_string());
    }
    let appender = TenantId::parse(APPEND_TENANT).expect("a valid name");
    let append_token = match tenants::issue_token(&pool, &appender, Scope::Admin, None).await? {
        Some(token) => token,
        None => tenants::create_tenant(&pool, &appender, Scope::Admin).await?,
    }
    .expose()
    .to_string();
    let engine = ProjectionConfig::default().engine();
    let mut rows = Vec::new();
    for &size in &options.sizes {
        let per_tenant = size / options.tenants as u64;
        let daemon = start_daemon(pool.clone(), SemanticConfig::off()).await?;
        let loading = Instant::now();
        for i in 0..options.tenants {
            let tenant = TenantId::parse(&tenant_name(i)).expect("a valid name");
            let loaded = history_events(&pool, &tenant_name(i)).await?;
            anyhow::ensure!(
                loaded <= per_tenant,
                "tenant {} holds {loaded} events, more than {per_tenant}",
                tenant_name(i)
            );
            load(&pool, &tenant, History::Chat, loaded, per_tenant).await?;
        }
        wait_projected(&pool).await?;
        eprintln!(
            "{size} events over {} tenants loaded and projected in {:.0} s",
            options.tenants,
            loading.elapsed().as_secs_f64()
        );
        let seconds = Duration::from_secs_f64(options.seconds);
        let (base, token) = (daemon.base_url.clone(), tokens[0].clone());
        let session = format!("session-{}", per_tenant.saturating_sub(1) / 200);
        let log_events: i64 =
            sqlx::query_scalar("SELECT coalesce(sum(seq), 0)::bigint FROM public.tenant_heads")
                .fetch_one(&pool)
                .await?;
        let fast = bundles(&base, &token, &session, true, seconds).await;
        let retrieval = bundles(&base, &token, &session, false, seconds).await;
        let single = appends(&base, &append_token, 1, seconds).await;
        let batched = appends(&base, &append_token, BATCH, seconds).await;
        eprintln!(
            "{size}: fast p95 {:.1} ms, retrieval p95 {:.1} ms, single {:.0}/s, batched {:.0}/s",
            fast.percentile_ms(95.0),
            retrieval.percentile_ms(95.0),
            single.events_per_second(),
            batched.events_per_second()
        );
        wait_projected(&pool).await?;
        daemon.stop().await?;
        // Another tenant than the one whose bundles were measured.
        let other = tenant_name(1);
        let started = Instant::now();
        memd_projectors::rebuild::rebuild(&pool, &engine, Some(&other), &mut |_| {}).await?;
        let rebuild = started.elapsed();
        let started = Instant::now();
        let reports =
            memd::audit::verify_chains(&pool, Some(&TenantId::parse(&other).expect("valid")))
                .await?;
        let verify = started.elapsed();
        anyhow::ensure!(
            reports.iter().all(|r| r.broken.is_none()),
            "the chain of {other} does not verify"
        );
        let (events_bytes, chunks_bytes): (i64, i64) = sqlx::query_as(
            // A partitioned table's own size is nothing: its partitions'
            // (a table that is not partitioned has no partition tree).
            "SELECT coalesce((SELECT sum(pg_total_relation_size(relid))::bigint
                                FROM pg_partition_tree('public.events')),
                             pg_total_relation_size('public.events')),
                    coalesce((SELECT sum(pg_total_relation_size(relid))::bigint
                                FROM pg_partition_tree('projections.chunks')),
                             pg_total_relation_size('projections.chunks'))",
        )
        .fetch_one(&pool)
        .await?;
        eprintln!(
            "{size}: rebuild of {per_tenant} events {:.1} s, verify {:.1} s",
            rebuild.as_secs_f64(),
            verify.as_secs_f64()
        );
        rows.push(Row {
            size,
            log_events,
            per_tenant,
            single,
            batched,
            fast,
            retrieval,
            rebuild,
            verify,
            events_bytes,
            chunks_bytes,
        });
    }
    pool.close().await;
    Ok((rows, environment))
}

/// Events of `tenant`'s loaded history.
async fn history_events(pool: &PgPool, tenant: &str) -> anyhow::Result<u64> {
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM public.events WHERE tenant_id = $1")
        .bind(tenant)
        .fetch_one(pool)
        .await?;
    Ok(count as u64)
}

async fn bundles(
    base: &str,
    token: &str,
    session: &str,
    fast: bool,
    seconds: Duration,
) -> Measurement {
    let session = session.to_owned();
    one_client(
        format!("{base}/api/v1/acb/build"),
        token,
        seconds,
        1,
        move |i| {
            if fast {
                json!({"session_id": session, "intent": "continue", "max_tokens": 65_000})
            } else {
                json!({"session_id": session, "query_text": question(i), "max_tokens": 65_000})
            }
        },
    )
    .await
}

/// One writer appending `batch` events a request.
async fn appends(base: &str, token: &str, batch: usize, seconds: Duration) -> Measurement {
    one_client(
        format!("{base}/api/v1/events"),
        token,
        seconds,
        batch,
        move |i| {
            let event = |n: usize| {
                json!({"session_id": APPEND_SESSION, "channel": "private",
                       "actor": {"type": "agent", "id": "bench"}, "kind": "message",
                       "content": {"text": format!("Scale bench note {i}.{n}: the export retried page {}", n % 97)}})
            };
            if batch == 1 {
                event(0)
            } else {
                json!({"events": (0..batch).map(event).collect::<Vec<_>>()})
            }
        },
    )
    .await
}

/// One client posting `body(i)` to `url` back to back for `seconds`; each
/// request carries `events_per_request` events.
async fn one_client(
    url: String,
    token: &str,
    seconds: Duration,
    events_per_request: usize,
    body: impl Fn(u64) -> Value + Clone + Send + Sync + 'static,
) -> Measurement {
    let client = reqwest::Client::new();
    let token = token.to_owned();
    drive(1, seconds, events_per_request, move |_, i| {
        let (client, url, token, body) = (client.clone(), url.clone(), token.clone(), body(i));
        async move {
            client
                .post(&url)
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await?
                .error_for_status()?;
            Ok(())
        }
    })
    .await
}

fn charts(out: &Path, rows: &[Row]) -> anyhow::Result<()> {
    use super::charts::{Axis, Series, lines, path_beside};
    let series = |name: &str, value: &dyn Fn(&Row) -> f64| {
        Series::new(
            name,
            rows.iter().map(|r| (r.size as f64, value(r))).collect(),
        )
    };
    lines(
        &path_beside(out, "latency"),
        "Latency by the log's total size (one client)",
        &Axis::log("events in the log (all tenants)"),
        &Axis::log("ms"),
        &[
            series("fast bundle p95", &|r| r.fast.percentile_ms(95.0)),
            series("retrieval bundle p95", &|r| r.retrieval.percentile_ms(95.0)),
            series("single append p95", &|r| r.single.percentile_ms(95.0)),
            series("batch of 100 p95", &|r| r.batched.percentile_ms(95.0)),
        ],
    )?;
    lines(
        &path_beside(out, "throughput"),
        "Throughput by the log's total size",
        &Axis::log("events in the log (all tenants)"),
        &Axis::log("events/s"),
        &[
            series("single appends", &|r| r.single.events_per_second()),
            series("batched appends", &|r| r.batched.events_per_second()),
            series("rebuild of one tenant", &|r| {
                r.per_tenant as f64 / r.rebuild.as_secs_f64()
            }),
            series("verify of one tenant", &|r| {
                r.per_tenant as f64 / r.verify.as_secs_f64()
            }),
        ],
    )
}

fn render(rows: &[Row], options: &Options, environment: &str) -> String {
    let mut out = report_header("scale", environment);
    out.push_str(&format!(
        "\nThe log: {} tenants, each with a chat history (as `memd-bench acb` loads it), loaded to each total size in turn and fully projected (lexical retrieval, no embedder). At each size, with the daemon in-process and nothing else running: bundles of the first tenant, one client for {} s each (fast path: `intent: continue`; retrieval: varied questions), then one writer appending (single events, then batches of {BATCH}) for {} s each, over HTTP, to a tenant of its own (`{APPEND_TENANT}`, whose events count in the log's total from the next size on). Then, with the daemon stopped: a rebuild of every projection of the second tenant (its whole log) and `verify` of its chain.\n\n",
        options.tenants, options.seconds, options.seconds
    ));
    out.push_str("| size | events in the log | per tenant | fast p50 / p95 ms | retrieval p50 / p95 ms | single appends/s (p95 ms) | batched events/s (p95 ms) | rebuild of one tenant s (events/s) | verify of one tenant s (events/s) | events table | chunks table |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mib = |bytes: i64| format!("{:.0} MiB", bytes as f64 / 1_048_576.0);
    for row in rows {
        let rate = |d: Duration| row.per_tenant as f64 / d.as_secs_f64().max(1e-9);
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} / {:.2} | {:.2} / {:.2} | {:.0} ({:.2}) | {:.0} ({:.2}) | {:.1} ({:.0}) | {:.1} ({:.0}) | {} | {} |\n",
            row.size,
            row.log_events,
            row.per_tenant,
            row.fast.percentile_ms(50.0),
            row.fast.percentile_ms(95.0),
            row.retrieval.percentile_ms(50.0),
            row.retrieval.percentile_ms(95.0),
            row.single.events_per_second(),
            row.single.percentile_ms(95.0),
            row.batched.events_per_second(),
            row.batched.percentile_ms(95.0),
            row.rebuild.as_secs_f64(),
            rate(row.rebuild),
            row.verify.as_secs_f64(),
            rate(row.verify),
            mib(row.events_bytes),
            mib(row.chunks_bytes),
        ));
    }
    let errors: usize = rows
        .iter()
        .map(|r| r.single.errors + r.batched.errors + r.fast.errors + r.retrieval.errors)
        .sum();
    out.push_str(&format!("\nFailed requests: {errors}.\n"));
    out
}
