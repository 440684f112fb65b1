//! `memd-bench project`: projection lag under a steady append rate, and
//! rebuild-from-zero throughput at growing history sizes.

use std::{
    collections::HashMap,
    fmt::Write as _,
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use memd_projectors::{EMBEDDED_CHANNEL, PROJECTED_CHANNEL, projections::embeddings, rebuild};
use serde_json::{Value, json};
use sqlx::{PgPool, postgres::PgListener};

use super::{
    cpu::CpuTimes,
    harness::{
        ScratchDatabase, environment, percentile, report_header, start_daemon, write_report,
    },
    histories::{History, load},
};
use memd::{
    admin::progress::ProgressPrinter,
    db,
    domain::tenant::{Scope, TenantId},
    read::semantic::SemanticConfig,
    startup::ProjectionConfig,
    tenants,
};

/// Tenants the steady load is spread over, one paced writer each.
const LAG_TENANTS: usize = 8;

pub struct Options {
    pub rate: u32,
    pub seconds: f64,
    pub sizes: Vec<u64>,
    /// Chat sizes at which the embeddings projection is rebuilt too.
    pub embed_sizes: Vec<u64>,
    /// The daemon's embedder (its embeddings lag is measured beside the
    /// projections').
    pub semantic: SemanticConfig,
}

struct LagResult {
    sent: usize,
    errors: usize,
    achieved_rate: f64,
    lags: Vec<Duration>,
    unobserved: usize,
    /// The same for the embeddings projection (`memd_embedded`).
    embedding_lags: Vec<Duration>,
    embedding_unobserved: usize,
    /// (seconds into the run when acknowledged, lag): the lag over time,
    /// of the projections and of the embeddings.
    timeline: Vec<(f64, Duration)>,
    embedding_timeline: Vec<(f64, Duration)>,
}

/// Rebuilding the embeddings projection of the chat history from zero.
struct EmbeddingRebuild {
    embedder: String,
    events: u64,
    chunks: i64,
    elapsed: Duration,
}

struct RebuildResult {
    history: History,
    events: u64,
    chunks: i64,
    elapsed: Duration,
    /// PostgreSQL alone writing the same chunk rows (see [`raw_chunk_insert`]).
    raw_chunks: RawInsert,
    load_elapsed: Duration,
    /// CPU used during the rebuild by memd and by PostgreSQL, if readable.
    cpu: Option<CpuTimes>,
    /// Reading the log, then each projector's share of `elapsed`.
    reading: Duration,
    by_projector: Vec<(&'static str, Duration)>,
}

/// PostgreSQL alone writing a tenant's chunk rows ([`raw_chunk_insert`]).
#[derive(Clone, Copy)]
struct RawInsert {
    /// Into a table like the real one: logged, so its rows and index
    /// entries go through the WAL as a rebuild's do.
    logged: Duration,
    /// Into a temporary table: no WAL, local buffers (the floor this bench
    /// compared with before 2026-11-27).
    temporary: Duration,
}

/// PostgreSQL's own cost of what dominates a rebuild: one INSERT of the
/// tenant's chunk rows, as the rebuild produced them, into an identical
/// table (same generated tsvector, same indexes), once logged like the
/// real table and once temporary. No reading of the log, no token
/// counting, no other projection.
async fn raw_chunk_insert(pool: &PgPool, tenant: &TenantId) -> anyhow::Result<RawInsert> {
    const COLUMNS: &str = "tenant_id, chunk_id, event_id, seq, part, ts, session_id, channel, \
        sensitivity, actor_type, actor_id, kind, tags, source, line_start, line_end, text, \
        token_est, importance, content_hash, word_hashes";
    let mut conn = pool.acquire().await?;
    let mut timed = async |table: &str, create: &str| -> anyhow::Result<Duration> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "{create} {table} (LIKE projections.chunks INCLUDING ALL)"
        )))
        .execute(&mut *conn)
        .await?;
        let started = Instant::now();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} ({COLUMNS}) SELECT {COLUMNS} FROM projections.chunks WHERE tenant_id = $1"
        )))
        .bind(tenant.as_str())
        .execute(&mut *conn)
        .await?;
        let elapsed = started.elapsed();
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
            .execute(&mut *conn)
            .await?;
        Ok(elapsed)
    };
    let logged = timed("public.bench_raw_chunks", "CREATE TABLE").await?;
    let temporary = timed("raw_chunks", "CREATE TEMP TABLE").await?;
    Ok(RawInsert { logged, temporary })
}

pub async fn run(database_url: &str, options: Options, out: &Path) -> anyhow::Result<()> {
    let scratch = ScratchDatabase::create(database_url, "memd_bench").await?;
    let result = measure(&scratch, &options).await;
    scratch.drop_now().await?;
    let (lag, rebuilds, embedding_rebuilds, environment) = result?;
    charts(out, &options, &lag, &rebuilds)?;
    let report = render(&options, &lag, &rebuilds, &embedding_rebuilds, &environment);
    write_report(out, &report)
}

/// `<out>-lag.svg`: p50 and p95 lag in each second of the steady load;
/// `<out>-rebuild.svg`: rebuild events/s by history size, beside
/// PostgreSQL's own INSERT of the same chunk rows.
fn charts(
    out: &Path,
    options: &Options,
    lag: &LagResult,
    rebuilds: &[RebuildResult],
) -> anyhow::Result<()> {
    use super::charts::{Axis, Series, grouped, lines, path_beside};
    let per_second = |timeline: &[(f64, Duration)], p: f64| -> Vec<(f64, f64)> {
        let mut seconds: std::collections::BTreeMap<u64, Vec<Duration>> = Default::default();
        for (at, lag) in timeline {
            seconds.entry(*at as u64).or_default().push(*lag);
        }
        seconds
            .into_iter()
            .map(|(second, lags)| {
                (
                    second as f64 + 0.5,
                    percentile(&lags, p).as_secs_f64() * 1e3,
                )
            })
            .collect()
    };
    let mut series = vec![
        Series::new("projections p50", per_second(&lag.timeline, 50.0)),
        Series::new("projections p95", per_second(&lag.timeline, 95.0)),
    ];
    if !lag.embedding_timeline.is_empty() {
        series.push(Series::new(
            "embeddings p50",
            per_second(&lag.embedding_timeline, 50.0),
        ));
        series.push(Series::new(
            "embeddings p95",
            per_second(&lag.embedding_timeline, 95.0),
        ));
    }
    lines(
        &path_beside(out, "lag"),
        &format!(
            "Projection lag over time at {} appended events/s (commit to projected)",
            options.rate
        ),
        &Axis::linear("seconds into the steady load"),
        &Axis::log("lag, ms"),
        &series,
    )?;
    if !rebuilds.is_empty() {
        lines(
            &path_beside(out, "rebuild"),
            "Rebuild from zero: events/s by history size (dashed: PostgreSQL inserting the same chunk rows)",
            &Axis::log("events in the history"),
            &Axis::log("events/s"),
            &grouped(
                rebuilds.iter().flat_map(|r| {
                    let events = r.events as f64;
                    [
                        (
                            format!("memd rebuild, {}", r.history.name()),
                            events,
                            events / r.elapsed.as_secs_f64().max(1e-9),
                        ),
                        (
                            format!("raw chunk INSERT, {}", r.history.name()),
                            events,
                            events / r.raw_chunks.logged.as_secs_f64().max(1e-9),
                        ),
                    ]
                }),
                |name| name.starts_with("raw"),
            ),
        )?;
    }
    Ok(())
}

async fn measure(
    scratch: &ScratchDatabase,
    options: &Options,
) -> anyhow::Result<(LagResult, Vec<RebuildResult>, Vec<EmbeddingRebuild>, String)> {
    let pool = db::connect(scratch.options.clone(), 24).await?;
    db::migrate(&pool).await?;
    let environment = environment(&pool).await?;
    let lag = measure_lag(&pool, options).await?;
    eprintln!(
        "lag at {:.0} events/s: p50 {:.1} ms, p95 {:.1} ms; embeddings p50 {:.1} ms, p95 {:.1} ms",
        lag.achieved_rate,
        percentile(&lag.lags, 50.0).as_secs_f64() * 1e3,
        percentile(&lag.lags, 95.0).as_secs_f64() * 1e3,
        percentile(&lag.embedding_lags, 50.0).as_secs_f64() * 1e3,
        percentile(&lag.embedding_lags, 95.0).as_secs_f64() * 1e3,
    );
    let mut rebuilds = Vec::new();
    let mut embedding_rebuilds = Vec::new();
    for history in [History::Chat, History::ToolHeavy] {
        let tenant = TenantId::parse(history.name()).expect("valid tenant id");
        tenants::create_tenant(&pool, &tenant, Scope::Write).await?;
        let mut loaded = 0;
        for &size in &options.sizes {
            let started = Instant::now();
            load(&pool, &tenant, history, loaded, size).await?;
            let load_elapsed = started.elapsed();
            loaded = size;
            let engine = ProjectionConfig::default().engine();
            let cpu_before = CpuTimes::now();
            let started = Instant::now();
            let done = rebuild::rebuild(&pool, &engine, Some(tenant.as_str()), &mut |_| {}).await?;
            let elapsed = started.elapsed();
            let cpu = CpuTimes::now()
                .zip(cpu_before)
                .map(|(after, before)| after.since(&before));
            let chunks: i64 =
                sqlx::query_scalar("SELECT count(*) FROM projections.chunks WHERE tenant_id = $1")
                    .bind(tenant.as_str())
                    .fetch_one(&pool)
                    .await?;
            let raw_chunks = raw_chunk_insert(&pool, &tenant).await?;
            let events = done.iter().map(|t| t.events as u64).sum();
            eprintln!(
                "{} rebuild of {events} events: {:.1} s, {:.0} events/s (raw chunk INSERT {:.1} s, {:.1} s temporary)",
                history.name(),
                elapsed.as_secs_f64(),
                events as f64 / elapsed.as_secs_f64(),
                raw_chunks.logged.as_secs_f64(),
                raw_chunks.temporary.as_secs_f64(),
            );
            let [done] = done.as_slice() else {
                anyhow::bail!("one tenant rebuilt, not {}", done.len());
            };
            rebuilds.push(RebuildResult {
                history,
                events,
                chunks,
                elapsed,
                raw_chunks,
                load_elapsed,
                cpu,
                reading: done.reading,
                by_projector: done.by_projector.clone(),
            });
            if matches!(history, History::Chat)
                && options.embed_sizes.contains(&size)
                && let Some(embedder) = &options.semantic.embedder
            {
                embedding_rebuilds
                    .push(rebuild_embeddings(&pool, &tenant, embedder, &options.semantic).await?);
            }
        }
    }
    pool.close().await;
    Ok((lag, rebuilds, embedding_rebuilds, environment))
}

/// Rebuilds `tenant`'s embeddings projection of `embedder` from zero, with
/// a progress bar on stderr.
async fn rebuild_embeddings(
    pool: &PgPool,
    tenant: &TenantId,
    embedder: &str,
    semantic: &SemanticConfig,
) -> anyhow::Result<EmbeddingRebuild> {
    let projector = embeddings::projector_name(embedder).expect("a known embedder");
    let names = [projector.to_owned()];
    let engine = ProjectionConfig::default()
        .engine_with_embeddings(&names, &semantic.models)?
        .only(&names)?;
    let mut printer = ProgressPrinter::new("embed");
    let started = Instant::now();
    let done = rebuild::rebuild(pool, &engine, Some(tenant.as_str()), &mut |p| {
        printer.update(p)
    })
    .await?;
    let elapsed = started.elapsed();
    let chunks: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM projections.{projector} WHERE tenant_id = $1"
    )))
    .bind(tenant.as_str())
    .fetch_one(pool)
    .await?;
    eprintln!(
        "{embedder} embeddings rebuild: {chunks} chunks in {:.1} s ({:.0} chunks/s)",
        elapsed.as_secs_f64(),
        chunks as f64 / elapsed.as_secs_f64()
    );
    Ok(EmbeddingRebuild {
        embedder: embedder.to_owned(),
        events: done.iter().map(|t| t.events as u64).sum(),
        chunks,
        elapsed,
    })
}

/// Appends at `rate` events/s over HTTP for `seconds`, and times each event
/// from its acknowledged commit to the projection commit that covers it
/// (announced on `memd_projected`).
async fn measure_lag(pool: &PgPool, options: &Options) -> anyhow::Result<LagResult> {
    let mut tokens = Vec::new();
    for index in 0..LAG_TENANTS {
        let tenant = TenantId::parse(&format!("lag-{index}")).expect("valid tenant id");
        tokens.push(
            tenants::create_tenant(pool, &tenant, Scope::Write)
                .await?
                .expose()
                .to_string(),
        );
    }
    // (channel, tenant, seq, when)
    type Seen = Vec<(bool, String, i64, Instant)>;
    let projected: Arc<Mutex<Seen>> = Arc::default();
    let mut listener = PgListener::connect_with(pool).await?;
    listener
        .listen_all([PROJECTED_CHANNEL, EMBEDDED_CHANNEL])
        .await?;
    let seen = projected.clone();
    let listening = tokio::spawn(async move {
        while let Ok(notification) = listener.recv().await {
            let embedded = notification.channel() == EMBEDDED_CHANNEL;
            if let Some((tenant, seq)) = notification.payload().rsplit_once(':')
                && let Ok(seq) = seq.parse()
            {
                seen.lock()
                    .expect("lock")
                    .push((embedded, tenant.to_owned(), seq, Instant::now()));
            }
        }
    });

    let daemon = start_daemon(pool.clone(), options.semantic.clone()).await?;
    let client = reqwest::Client::new();
    let url = format!("{}/api/v1/events", daemon.base_url);
    let interval = Duration::from_secs_f64(LAG_TENANTS as f64 / f64::from(options.rate.max(1)));
    let duration = Duration::from_secs_f64(options.seconds);
    let started = Instant::now();
    let writers: Vec<_> = tokens
        .into_iter()
        .enumerate()
        .map(|(index, token)| {
            let client = client.clone();
            let url = url.clone();
            tokio::spawn(async move {
                let mut acked = Vec::new();
                let mut errors = 0;
                let mut ticker = tokio::time::interval(interval);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let mut i = 0_u64;
                while started.elapsed() < duration {
                    ticker.tick().await;
                    let body = message(index, i);
                    i += 1;
                    let response = client
                        .post(&url)
                        .bearer_auth(&token)
                        .json(&body)
                        .send()
                        .await;
                    let at = Instant::now();
                    match response {
                        Ok(r) if r.status().is_success() => {
                            let seq = r.json::<Value>().await.ok().and_then(|v| v["seq"].as_i64());
                            match seq {
                                Some(seq) => acked.push((seq, at)),
                                None => errors += 1,
                            }
                        }
                        _ => errors += 1,
                    }
                }
                (format!("lag-{index}"), acked, errors)
            })
        })
        .collect();
    let mut acks = Vec::new();
    let mut errors = 0;
    for writer in writers {
        let (tenant, acked, writer_errors) = writer.await?;
        errors += writer_errors;
        acks.push((tenant, acked));
    }
    let sending = started.elapsed();
    // Let the last batches land.
    tokio::time::sleep(Duration::from_secs(5)).await;
    daemon.stop().await?;
    listening.abort();

    let projected = projected.lock().expect("lock");
    let lags_on = |embedded: bool| {
        let mut by_tenant: HashMap<&str, Vec<(i64, Instant)>> = HashMap::new();
        for (channel, tenant, seq, at) in projected.iter() {
            if *channel == embedded {
                by_tenant.entry(tenant).or_default().push((*seq, *at));
            }
        }
        let mut timeline = Vec::new();
        let mut unobserved = 0;
        for (tenant, acked) in &acks {
            let notes = by_tenant.get(tenant.as_str()).cloned().unwrap_or_default();
            for (seq, acked_at) in acked {
                // The first commit covering this seq.
                match notes.iter().find(|(covered, _)| covered >= seq) {
                    Some((_, at)) => timeline.push((
                        acked_at.saturating_duration_since(started).as_secs_f64(),
                        at.saturating_duration_since(*acked_at),
                    )),
                    None => unobserved += 1,
                }
            }
        }
        (timeline, unobserved)
    };
    let (timeline, unobserved) = lags_on(false);
    let (embedding_timeline, embedding_unobserved) = if options.semantic.embedder.is_some() {
        lags_on(true)
    } else {
        (Vec::new(), 0)
    };
    let lags = timeline.iter().map(|(_, lag)| *lag).collect();
    let embedding_lags = embedding_timeline.iter().map(|(_, lag)| *lag).collect();
    let sent = acks.iter().map(|(_, acked)| acked.len()).sum::<usize>();
    Ok(LagResult {
        sent,
        errors,
        achieved_rate: sent as f64 / sending.as_secs_f64(),
        lags,
        unobserved,
        embedding_lags,
        embedding_unobserved,
        timeline,
        embedding_timeline,
    })
}

fn message(writer: usize, i: u64) -> Value {
    json!({
        "session_id": format!("lag-session-{writer}"),
        "channel": "private",
        "actor": {"type": "agent", "id": format!("agent-{writer}")},
        "kind": "message",
        "content": {"text": format!(
            "Lag probe {i} from writer {writer}: the deploy of the billing service to staging \
             finished; smoke tests green except the invoice export, which times out after 30 s."
        )},
    })
}

fn render(
    options: &Options,
    lag: &LagResult,
    rebuilds: &[RebuildResult],
    embedding_rebuilds: &[EmbeddingRebuild],
    environment: &str,
) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut out = report_header("project", environment);
    out.push('\n');
    let _ = writeln!(out, "## Projection lag under a steady append rate\n");
    let _ = writeln!(
        out,
        "{LAG_TENANTS} tenants, one paced HTTP writer each, single-event appends for {:.0} s at a target of {} events/s; \
         the daemon runs its default projection workers and its embedding worker (embedder: {}). Lag = from the \
         append's acknowledged commit to the commit that covers the event: the projections' (`memd_projected`) and, \
         on its own worker, the embeddings projection's (`memd_embedded`).\n",
        options.seconds,
        options.rate,
        options.semantic.embedder.as_deref().unwrap_or("none")
    );
    let _ = writeln!(
        out,
        "| events sent | achieved events/s | errors | lag p50 ms | lag p95 ms | lag p99 ms | lag max ms | never observed |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        out,
        "| {} | {:.0} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
        lag.sent,
        lag.achieved_rate,
        lag.errors,
        ms(percentile(&lag.lags, 50.0)),
        ms(percentile(&lag.lags, 95.0)),
        ms(percentile(&lag.lags, 99.0)),
        ms(percentile(&lag.lags, 100.0)),
        lag.unobserved
    );
    if options.semantic.embedder.is_some() {
        let _ = writeln!(
            out,
            "\nEmbeddings projection, same run:\n\n| lag p50 ms | lag p95 ms | lag p99 ms | lag max ms | never observed |\n|---:|---:|---:|---:|---:|\n| {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            ms(percentile(&lag.embedding_lags, 50.0)),
            ms(percentile(&lag.embedding_lags, 95.0)),
            ms(percentile(&lag.embedding_lags, 99.0)),
            ms(percentile(&lag.embedding_lags, 100.0)),
            lag.embedding_unobserved
        );
    }
    let _ = writeln!(out, "\n## Rebuild from zero\n");
    let _ = writeln!(
        out,
        "Per history, one tenant loaded with batched appends up to each size (each size on top of the previous), \
         then `rebuild` of every projector for that tenant, in one transaction. \
         *Raw chunk INSERT* is PostgreSQL alone writing the same chunk rows in one statement into an identical \
         table (generated tsvector, GIN and b-tree indexes), logged like the real one: the floor for the projection \
         that dominates a rebuild. *Temporary* is the same INSERT into a temporary table, which skips the WAL \
         (a rebuild cannot: its rows must survive a crash).\n"
    );
    for history in [History::Chat, History::ToolHeavy] {
        let _ = writeln!(out, "- **{}**: {}", history.name(), history.describe());
    }
    let _ = writeln!(
        out,
        "\n| history | events | chunks | rebuild s | rebuild events/s | raw chunk INSERT s | memd / raw time | (temporary s) | (load s) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rebuilds {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {:.0} | {:.1} | {:.2} | {:.1} | {:.1} |",
            r.history.name(),
            r.events,
            r.chunks,
            r.elapsed.as_secs_f64(),
            r.events as f64 / r.elapsed.as_secs_f64(),
            r.raw_chunks.logged.as_secs_f64(),
            r.elapsed.as_secs_f64() / r.raw_chunks.logged.as_secs_f64().max(1e-9),
            r.raw_chunks.temporary.as_secs_f64(),
            r.load_elapsed.as_secs_f64()
        );
    }
    render_accounts(&mut out, rebuilds);
    if !embedding_rebuilds.is_empty() {
        let _ = writeln!(
            out,
            "\n## Embeddings projection rebuilt from zero\n\n\
             The chat history's embeddings projection alone (`memd rebuild --projector embeddings_<name>`): \
             every chunk embedded again, on this machine's CPU.\n\n\
             | embedder | events | chunks | rebuild s | chunks/s |\n|---|---:|---:|---:|---:|"
        );
        for r in embedding_rebuilds {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.0} |",
                r.embedder,
                r.events,
                r.chunks,
                r.elapsed.as_secs_f64(),
                r.chunks as f64 / r.elapsed.as_secs_f64()
            );
        }
    }
    out
}

/// Where each rebuild's wall-clock time went: on whose CPU, and in which
/// step (reading the log, each projector's `apply`).
fn render_accounts(out: &mut String, rebuilds: &[RebuildResult]) {
    let Some(first) = rebuilds.first() else {
        return;
    };
    let names: Vec<&str> = first.by_projector.iter().map(|(name, _)| *name).collect();
    let _ = writeln!(
        out,
        "\n### Where a rebuild's time goes\n\n\
         CPU seconds during the rebuild, from `/proc`: memd's process, and every `postgres` process on the \
         machine (its backend, WAL writer, checkpointer). Two cores: CPU seconds above the wall seconds mean \
         both were busy at once. Then the wall seconds of each step inside the transaction: reading the log \
         (the time the transaction waited for its next batch, which a second connection reads ahead \
         while the batch before is applied), and each projector's `apply`, which includes the round \
         trips of its statements (PostgreSQL's work on its rows) as well as memd's own.\n"
    );
    let _ = writeln!(
        out,
        "| history | events | wall s | memd CPU s | PostgreSQL CPU s | reading s | {} |",
        names
            .iter()
            .map(|n| format!("{n} s"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|{}",
        "---:|".repeat(names.len())
    );
    let seconds = |d: Duration| format!("{:.1}", d.as_secs_f64());
    for r in rebuilds {
        let (memd, postgres) = match r.cpu {
            Some(cpu) => (
                seconds(cpu.memd),
                cpu.postgres.map_or_else(|| "n/a".to_owned(), seconds),
            ),
            None => ("n/a".to_owned(), "n/a".to_owned()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {memd} | {postgres} | {} | {} |",
            r.history.name(),
            r.events,
            seconds(r.elapsed),
            seconds(r.reading),
            r.by_projector
                .iter()
                .map(|(_, spent)| seconds(*spent))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
}
