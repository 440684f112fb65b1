//! Rebuild and drift check as background jobs, for operators who drive memd
//! over HTTP. Jobs are queued in PostgreSQL with apalis (tables in the
//! `apalis` schema), so a job survives a restart of the daemon that accepted
//! it, and any daemon or `memd project` process on the database may run it.
//! A job always concerns one tenant: the one whose admin token queued it.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use apalis::prelude::{
    BackendExt, BoxDynError, Data, Strategy, TaskBuilder, TaskId, WorkerBuilder,
};
use apalis_postgres::{Config, PostgresStorage};
use chrono::{DateTime, Utc};
use memd_projectors::{
    Engine, drift,
    notifications::{Heard, Listener},
    rebuild,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sqlx::{PgPool, Row, postgres::PgPoolOptions};
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};

/// The apalis queue (its `job_type`) every memd admin job goes through.
pub const QUEUE: &str = "memd.admin";

/// What a job does. Stored as JSON in `apalis.jobs.job`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AdminJob {
    /// Drop the tenant's projections (of `projectors`, all when empty) and replay.
    Rebuild {
        tenant: String,
        #[serde(default)]
        projectors: Vec<String>,
    },
    /// Rebuild the tenant's projections in a shadow schema and diff.
    DriftCheck { tenant: String },
    /// Recompute the tenant's hash chain from its first event, then check
    /// the signed `checkpoints` (of this tenant) under `public_key`, the
    /// key the auditor trusts.
    Verify {
        tenant: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        checkpoints: Vec<crate::audit::checkpoint::Checkpoint>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        public_key: Option<String>,
    },
}

impl AdminJob {
    pub fn tenant(&self) -> &str {
        match self {
            Self::Rebuild { tenant, .. }
            | Self::DriftCheck { tenant }
            | Self::Verify { tenant, .. } => tenant,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::Rebuild { .. } => "rebuild",
            Self::DriftCheck { .. } => "drift_check",
            Self::Verify { .. } => "verify",
        }
    }
}

/// Creates the apalis tables (idempotent; they live in their own schema
/// with their own migration history).
pub async fn setup(pool: &PgPool) -> Result<(), apalis_postgres::Error> {
    PostgresStorage::setup(pool).await
}

/// Queues `job` and returns its id. A failed job is not retried: the
/// operator reads the error and queues it again.
pub async fn enqueue(pool: &PgPool, job: &AdminJob) -> Result<String, apalis_postgres::Error> {
    let id = ulid::Ulid::generate();
    let task =
        TaskBuilder::new(serde_json::to_vec(job).map_err(apalis_postgres::Error::JsonError)?)
            .task_id(TaskId::from_ulid(id))
            .max_attempts(1)
            .build();
    let mut conn = pool.acquire().await?;
    apalis_postgres::queries::push_tasks(&mut *conn, QUEUE, vec![task]).await?;
    Ok(id.to_string())
}

/// A job as the status endpoint shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobStatus {
    pub job_id: String,
    #[schema(value_type = JobKind)]
    pub kind: &'static str,
    #[schema(value_type = JobState)]
    pub status: &'static str,
    pub queued_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// What the job produced, once done. A rebuild: `{tenant, projectors,
    /// events, seconds, events_per_second}`; a drift check: `{drifted,
    /// report, text}` (the report of `memd drift-check --json` and its
    /// readable rendering); a verification: `{tenant, ok, events_ok,
    /// head_hash, broken, public_key, checkpoints}`, each checkpoint `{seq,
    /// signed_at, finding (holds, bad_signature, broken), reason,
    /// last_holding_seq, line}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed, once failed. A failed job is not retried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a job does ([`AdminJob::kind`]). Documentation only.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum JobKind {
    Rebuild,
    DriftCheck,
    Verify,
}

/// Where a job is. Documentation only: [`status`] maps apalis' states to these.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum JobState {
    Pending,
    Running,
    Done,
    Failed,
}

/// The job `id` of `tenant`; `None` when it does not exist or belongs to
/// another tenant (indistinguishable to the caller).
pub async fn status(
    pool: &PgPool,
    tenant: &str,
    id: &str,
) -> Result<Option<JobStatus>, sqlx::Error> {
    let row = sqlx::query(
        // A verification's checkpoints stay in the database: the console
        // polls this several times a second, and they can be megabytes.
        "SELECT convert_from(job, 'UTF8')::jsonb - 'checkpoints' AS job, status, last_result,
                run_at AS queued_at, lock_at AS started_at, done_at AS finished_at
           FROM apalis.jobs WHERE id = $1 AND job_type = $2",
    )
    .bind(id)
    .bind(QUEUE)
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let Ok(job) = serde_json::from_value::<AdminJob>(row.try_get("job")?) else {
        return Ok(None);
    };
    if job.tenant() != tenant {
        return Ok(None);
    }
    let raw_status: String = row.try_get("status")?;
    let last_result: Option<Value> = row.try_get("last_result")?;
    let (status, result, error) = match (raw_status.as_str(), last_result) {
        ("Done", Some(Value::Object(mut outcome))) if outcome.contains_key("Ok") => {
            ("done", outcome.remove("Ok"), None)
        }
        ("Done" | "Failed" | "Killed", Some(outcome)) => {
            let error = outcome
                .get("Err")
                .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
                .unwrap_or_else(|| outcome.to_string());
            ("failed", None, Some(error))
        }
        ("Done", None) => ("done", None, None),
        ("Failed" | "Killed", None) => ("failed", None, None),
        ("Running", _) => ("running", None, None),
        _ => ("pending", None, None),
    };
    Ok(Some(JobStatus {
        job_id: id.to_owned(),
        kind: job.kind(),
        status,
        queued_at: row.try_get("queued_at")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        result,
        error,
    }))
}

/// What a job runs against.
#[derive(Clone)]
struct JobContext {
    pool: PgPool,
    engine: Arc<Engine>,
    /// One job at a time: rebuilds of a tenant serialize on its cursors
    /// anyway, and concurrent jobs' `VACUUM`s wait on each other while each
    /// holds a connection, which can drain the daemon's pool (the fuzz
    /// drill queued dozens at once and requests got 503s).
    one_at_a_time: Arc<tokio::sync::Semaphore>,
}

async fn run_job(job: AdminJob, ctx: Data<JobContext>) -> Result<Value, BoxDynError> {
    let _turn = ctx.one_at_a_time.acquire().await?;
    let started = Instant::now();
    tracing::info!(
        tenant = job.tenant(),
        kind = job.kind(),
        "admin job started"
    );
    let result = match &job {
        AdminJob::Rebuild { tenant, projectors } => {
            let engine = ctx.engine.only(projectors)?;
            let done = rebuild::rebuild(&ctx.pool, &engine, Some(tenant), &mut |_| {}).await?;
            let events: i64 = done.iter().map(|t| t.events).sum();
            let seconds = started.elapsed().as_secs_f64();
            rebuild::vacuum_analyze(&ctx.pool, &engine, Some(std::slice::from_ref(tenant))).await?;
            json!({
                "tenant": tenant,
                "projectors": engine.projectors().iter().map(|p| p.name()).collect::<Vec<_>>(),
                "events": events,
                "seconds": seconds,
                "events_per_second": events as f64 / seconds.max(1e-9),
            })
        }
        AdminJob::DriftCheck { tenant } => {
            let report =
                drift::drift_check(&ctx.pool, &ctx.engine, Some(tenant), &mut |_| {}).await?;
            json!({
                "drifted": report.drifted(),
                "report": report,
                "text": drift::render(&report),
            })
        }
        AdminJob::Verify {
            tenant,
            checkpoints,
            public_key,
        } => {
            let id = crate::domain::tenant::TenantId::parse(tenant)
                .map_err(|e| format!("tenant {tenant:?}: {e:?}"))?;
            // The route refuses them too: a job reads only its own tenant.
            if let Some(foreign) = checkpoints.iter().find(|c| c.tenant != *tenant) {
                return Err(format!(
                    "a checkpoint of {:?} in a job of {tenant:?}",
                    foreign.tenant
                )
                .into());
            }
            let reports = crate::audit::verify_chains(&ctx.pool, Some(&id)).await?;
            let report = reports.first();
            let chain_ok = report.is_none_or(|r| r.broken.is_none());
            let trusted = public_key.as_deref().unwrap_or_default();
            let checked =
                crate::audit::checkpoint::check(&ctx.pool, trusted, checkpoints.clone()).await?;
            json!({
                "tenant": tenant,
                "ok": chain_ok && checked.iter().all(|c| c.holds()),
                "events_ok": report.map_or(0, |r| r.events_ok),
                "head_hash": report.map(|r| r.head_hash.clone()),
                "broken": report.and_then(|r| r.broken.as_ref()).map(|b| json!({
                    "seq": b.seq, "event_id": b.event_id, "reason": b.reason,
                })),
                "public_key": public_key,
                "checkpoints": checked.iter().map(|c| c.to_json(trusted)).collect::<Vec<_>>(),
            })
        }
    };
    tracing::info!(tenant = job.tenant(), kind = job.kind(), elapsed = ?started.elapsed(), "admin job finished");
    Ok(result)
}

/// The pool apalis polls and records jobs on, apart from memd's: apalis
/// begins its transactions with sqlx's `Pool::begin`, which a stopping or
/// restarting worker can cancel halfway, leaving the session inside a
/// transaction sqlx does not know of (see [`memd_projectors::transaction`]).
/// A connection released in that state is closed here, never reused. The
/// check is a round trip per release, which apalis' one poll a second can
/// afford and memd's own pool need not pay: its transactions begin safely.
pub fn queue_pool(pool: &PgPool) -> PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(10))
        .after_release(|conn, _| {
            Box::pin(async move { Ok(!memd_projectors::transaction::in_block(conn).await) })
        })
        .connect_lazy_with((*pool.connect_options()).clone())
}

/// A running worker that takes jobs from [`QUEUE`].
pub struct JobWorker {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    queue_pool: PgPool,
}

/// The channel apalis's trigger on its jobs table notifies when a job is
/// queued.
const QUEUED_CHANNEL: &str = "apalis::job::insert";

/// Wakes the worker when anything is heard on [`QUEUED_CHANNEL`] (or the
/// listener listens again): heard on the process's one listening
/// connection, not on a session of apalis's own (`Pubsub`), since every
/// listening session costs each append's commit a signal and a wakeup.
/// Shared by the worker's restarts, one at a time.
struct Queued(Arc<std::sync::Mutex<mpsc::UnboundedReceiver<Heard>>>);

impl futures_core::Stream for Queued {
    type Item = ();

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<()>> {
        use std::task::Poll;
        match self.0.lock().expect("queued lock").poll_recv(cx) {
            Poll::Ready(Some(_)) => Poll::Ready(Some(())),
            // The listener stopped (the process is stopping): the worker's
            // one-second poll alone, not an ended stream.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }
}

impl JobWorker {
    /// Starts the worker, woken by `listener` (which the caller spawns)
    /// when a job is queued.
    pub fn spawn(pool: PgPool, engine: Arc<Engine>, listener: &mut Listener) -> Self {
        let queued = Arc::new(std::sync::Mutex::new(listener.subscribe(&[QUEUED_CHANNEL])));
        let (stop, stopped) = watch::channel(false);
        let queue_pool = queue_pool(&pool);
        let context = JobContext {
            pool,
            engine,
            one_at_a_time: Arc::new(tokio::sync::Semaphore::new(1)),
        };
        let polled = queue_pool.clone();
        let task = tokio::spawn(async move {
            // A worker that stops on an error (its backend's poll could not
            // get a connection, say) is started again: jobs must not wait
            // forever behind one bad moment of the database.
            loop {
                let mut signalled = stopped.clone();
                let signal = async move {
                    let _ = signalled.wait_for(|stop| *stop).await;
                    Ok::<(), std::io::Error>(())
                };
                // Woken by NOTIFY when a job is queued, and polling every
                // second so a job queued while the listener was not yet (or
                // no longer) connected is not left waiting.
                let wake = Strategy::new()
                    .stream(Queued(queued.clone()))
                    .interval(Duration::from_secs(1));
                let storage = PostgresStorage::<AdminJob>::new(&polled)
                    .with_config(Config::default().queue(QUEUE).batch_size(1))
                    .poll_with_strategy(wake);
                let worker = WorkerBuilder::new(crate::domain::new_id("memd-admin"))
                    .backend(storage)
                    .data(context.clone())
                    .build(run_job);
                match worker.run_until(signal).await {
                    Ok(()) => return,
                    Err(err) => {
                        tracing::warn!(error = %err, "admin job worker stopped; starting it again in 1 s")
                    }
                }
                if *stopped.borrow() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        Self {
            stop,
            task,
            queue_pool,
        }
    }

    /// Stops taking jobs; a job being run finishes first.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        self.queue_pool.close().await;
    }
}
