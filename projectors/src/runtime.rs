//! Keeps the live projections caught up with the log.
//!
//! A task hears each append announced on [`EVENTS_CHANNEL`] (through a
//! [`Listener`]) and hands the notified tenant to one of the workers (a
//! tenant always goes to the same worker). It also polls every
//! `poll_interval` for tenants whose cursors are behind their head, so a
//! lost notification (or a listener reconnecting) only delays projection.
//! Workers apply batches through [`Engine::step`], whose cursor locks (`FOR
//! UPDATE SKIP LOCKED`) also keep workers of other processes from applying
//! the same events.

use std::{
    collections::{HashSet, VecDeque, hash_map::DefaultHasher},
    hash::{Hash, Hasher},
    sync::{Arc, Mutex},
    time::Duration,
};

use backon::{BackoffBuilder, ExponentialBuilder};
use sqlx::PgPool;
use tokio::{
    sync::{Notify, mpsc, watch},
    task::JoinHandle,
};

use crate::{
    EVENTS_CHANNEL,
    engine::{Engine, ProjectError, Step},
    notifications::{Heard, Listener},
    projector::BoxFuture,
};

#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// How often to look for lagging tenants without being notified.
    pub poll_interval: Duration,
    /// Worker tasks in this process; tenants are partitioned among them.
    pub workers: usize,
    /// LISTEN for appends. Off, projection relies on polling alone.
    pub listen: bool,
    /// How long a woken worker waits before stepping the tenants queued
    /// then, so that the appends following the one that woke it commit too
    /// and one projection transaction carries them all (see [`work`]).
    pub gather: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(1),
            workers: 2,
            listen: true,
            gather: DEFAULT_GATHER,
        }
    }
}

/// What a runtime keeps current: which tenants lag, and how to bring one
/// up to date. An [`Engine`] is one (its projectors, for every tenant);
/// the embeddings projections are another (each tenant's own embedders,
/// [`memd_embedder::worker`]).
pub trait Work: Send + Sync + 'static {
    /// Names a failure that no single projector caused (the batch's read,
    /// its commit) in [`record_failure`]'s table.
    fn label(&self) -> &'static str;

    /// Tenants with something to apply.
    fn lagging<'a>(&'a self, pool: &'a PgPool) -> BoxFuture<'a, Result<Vec<String>, sqlx::Error>>;

    /// An append was announced (any tenant's, by any process): work that
    /// yields to the write path notes when. Most work ignores it.
    fn appended(&self) {}

    /// Applies batches until `tenant` is caught up, another worker has it,
    /// the log has a hole, or `stopped` is set.
    fn catch_up<'a>(
        &'a self,
        pool: &'a PgPool,
        tenant: &'a str,
        stopped: &'a watch::Receiver<bool>,
    ) -> BoxFuture<'a, Result<(), ProjectError>>;
}

impl Work for Engine {
    fn label(&self) -> &'static str {
        ENGINE_LABEL
    }

    fn lagging<'a>(&'a self, pool: &'a PgPool) -> BoxFuture<'a, Result<Vec<String>, sqlx::Error>> {
        Box::pin(lagging_tenants(pool, self))
    }

    fn catch_up<'a>(
        &'a self,
        pool: &'a PgPool,
        tenant: &'a str,
        stopped: &'a watch::Receiver<bool>,
    ) -> BoxFuture<'a, Result<(), ProjectError>> {
        Box::pin(catch_up(pool, self, tenant, stopped))
    }
}

/// What [`Work::label`] an [`Engine`] gives: its failures concern every one
/// of its projections.
pub const ENGINE_LABEL: &str = "projections";

/// Keeps the last failure of `tenant`'s projection for operators (`GET
/// /api/v1/admin/projections`, the console): the projector that failed,
/// or the work's [`Work::label`] when none did alone. Best effort: when
/// the database itself is what failed, the log has it.
pub async fn record_failure(pool: &PgPool, tenant: &str, work: &dyn Work, err: &ProjectError) {
    let projector = err.projector().unwrap_or_else(|| work.label());
    let recorded = sqlx::query!(
        "INSERT INTO projections.failures (projector, tenant_id, error, failed_at)
         VALUES ($1, $2, $3, now())
         ON CONFLICT (projector, tenant_id)
         DO UPDATE SET error = EXCLUDED.error, failed_at = EXCLUDED.failed_at",
        projector,
        tenant,
        err.to_string()
    )
    .execute(pool)
    .await;
    if let Err(record) = recorded {
        tracing::debug!(tenant, error = %record, "could not record a projection failure");
    }
}

/// A running set of projection workers.
pub struct Runtime {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    /// Its own listener, when it has one (see [`Self::spawn`]).
    listener: Option<JoinHandle<()>>,
}

impl Runtime {
    /// Starts the workers, and when `config.listen` says so a connection of
    /// their own that listens for appends. A process running several
    /// runtimes (or other listeners) shares one with [`Self::spawn_on`].
    pub fn spawn(pool: PgPool, work: Arc<dyn Work>, config: RuntimeConfig) -> Self {
        let mut listener = Listener::default();
        let mut runtime = Self::spawn_on(pool.clone(), work, config, &mut listener);
        runtime.listener = Some(listener.spawn(pool, runtime.stop.subscribe()));
        runtime
    }

    /// Starts the workers, woken by `listener` (when `config.listen` says
    /// so), which the caller then spawns.
    pub fn spawn_on(
        pool: PgPool,
        work: Arc<dyn Work>,
        config: RuntimeConfig,
        listener: &mut Listener,
    ) -> Self {
        let appends = config.listen.then(|| listener.subscribe(&[EVENTS_CHANNEL]));
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(pool, work, config, appends, stopped));
        Self {
            stop,
            task,
            listener: None,
        }
    }

    /// Stops the workers after the batch each is applying (an embeddings
    /// batch is abandoned instead, see [`memd_embedder::worker`]), and
    /// waits.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        if let Some(listener) = self.listener {
            let _ = listener.await;
        }
    }
}

/// Tenants waiting for one worker, first come first served: under steady
/// load every tenant keeps arriving, and any other order starves some.
/// A tenant already waiting is not queued twice (its next step applies
/// everything above its cursor anyway).
#[derive(Default)]
struct Queue {
    waiting: Mutex<Waiting>,
    wake: Notify,
}

#[derive(Default)]
struct Waiting {
    order: VecDeque<String>,
    queued: HashSet<String>,
}

impl Queue {
    fn push(&self, tenant: String) {
        let mut waiting = self.waiting.lock().expect("queue lock");
        if waiting.queued.insert(tenant.clone()) {
            waiting.order.push_back(tenant);
        }
        drop(waiting);
        self.wake.notify_one();
    }

    fn len(&self) -> usize {
        self.waiting.lock().expect("queue lock").order.len()
    }

    fn pop(&self) -> Option<String> {
        let mut waiting = self.waiting.lock().expect("queue lock");
        let tenant = waiting.order.pop_front()?;
        waiting.queued.remove(&tenant);
        Some(tenant)
    }
}

/// Reconnect and retry delays: 50 ms doubling to 5 s, with jitter, forever.
pub fn backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .build()
}

async fn run(
    pool: PgPool,
    engine: Arc<dyn Work>,
    config: RuntimeConfig,
    mut appends: Option<mpsc::UnboundedReceiver<Heard>>,
    mut stopped: watch::Receiver<bool>,
) {
    let queues: Vec<Arc<Queue>> = (0..config.workers.max(1))
        .map(|_| Arc::new(Queue::default()))
        .collect();
    let workers: Vec<_> = queues
        .iter()
        .map(|queue| {
            tokio::spawn(work(
                pool.clone(),
                engine.clone(),
                queue.clone(),
                config.gather,
                stopped.clone(),
            ))
        })
        .collect();
    let dispatch = |tenant: String| {
        let mut hasher = DefaultHasher::new();
        tenant.hash(&mut hasher);
        queues[(hasher.finish() % queues.len() as u64) as usize].push(tenant);
    };

    let mut poll = tokio::time::interval(config.poll_interval);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let notified = async {
            match appends.as_mut() {
                Some(appends) => appends.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stopped.changed() => break,
            _ = poll.tick() => match engine.lagging(&pool).await {
                Ok(tenants) => tenants.into_iter().for_each(dispatch),
                Err(err) => tracing::warn!(error = %err, "looking for lagging tenants failed"),
            },
            heard = notified => match heard {
                Some(Heard::Notification { payload, .. }) => {
                    engine.appended();
                    if let Some((tenant, _seq)) = payload.rsplit_once(':') {
                        dispatch(tenant.to_owned());
                    }
                }
                // Whatever was appended while nobody listened.
                Some(Heard::Listening) => poll.reset_immediately(),
                // The listener stopped (its process is stopping): polling
                // alone until the workers stop too.
                None => appends = None,
            },
        }
    }
    for worker in workers {
        let _ = worker.await;
    }
}

/// Tenants with events above some cursor of the engine's projectors, or
/// with a cursor written by another projector version.
pub async fn lagging_tenants(pool: &PgPool, engine: &Engine) -> Result<Vec<String>, sqlx::Error> {
    let names: Vec<&str> = engine.projectors().iter().map(|p| p.name()).collect();
    let versions: Vec<i32> = engine.projectors().iter().map(|p| p.version()).collect();
    sqlx::query_scalar!(
        "SELECT h.tenant_id
           FROM public.tenant_heads h
          CROSS JOIN unnest($1::text[], $2::int[]) AS p (name, version)
           LEFT JOIN projections.cursors c ON c.tenant_id = h.tenant_id AND c.projector = p.name
          WHERE h.seq > 0 AND (c.seq IS NULL OR c.seq < h.seq OR c.version <> p.version)
          GROUP BY h.tenant_id
          ORDER BY h.tenant_id",
        &names as &[&str],
        &versions
    )
    .fetch_all(pool)
    .await
}

/// [`RuntimeConfig::gather`] unless configured: at a steady stream of
/// single appends from one writer, 10 ms instead of 2 cut the CPU per
/// appended event by an eighth (`lab/results/2026-12-04-gather/`), for a few ms
/// more of projection lag; since a tenant announced during its own step
/// waits for the next window too, a step carries ~8 events instead of ~2
/// there (`lab/results/2026-12-05-steps/`).
pub const DEFAULT_GATHER: Duration = Duration::from_millis(10);

async fn work(
    pool: PgPool,
    engine: Arc<dyn Work>,
    queue: Arc<Queue>,
    gather: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut retry = backoff();
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            () = queue.wake.notified() => {}
        }
        // Let the appends that follow the one that woke us commit too, so
        // one projection transaction carries several: under a steady stream
        // of single appends the step's round trips and CPU, which share the
        // machine with the appends, are paid once for them all, for a few
        // ms of lag.
        tokio::select! {
            _ = stopped.changed() => return,
            () = tokio::time::sleep(gather) => {}
        }
        // Only the tenants waiting now: one announced again during its own
        // step (the usual case under a steady stream) waits for the next
        // window instead of being stepped at once for the one or two events
        // that arrived meanwhile, which made steps carry ~2 events at one
        // writer's rate whatever the window.
        for _ in 0..queue.len() {
            let Some(tenant) = queue.pop() else { break };
            if *stopped.borrow() {
                return;
            }
            match engine.catch_up(&pool, &tenant, &stopped).await {
                Ok(()) => retry = backoff(),
                Err(err) => {
                    let delay = retry.next().unwrap_or(Duration::from_secs(5));
                    tracing::warn!(tenant, error = %err, ?delay, "projection failed; retrying");
                    record_failure(&pool, &tenant, &*engine, &err).await;
                    queue.push(tenant);
                    tokio::select! {
                        _ = stopped.changed() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }
}

/// Applies batches until the tenant is caught up, another worker has it, or
/// the log has a hole (an earlier seq not committed yet: the next
/// notification or poll comes back for it).
///
/// A projector whose statements fail holds back only itself: the batch is
/// applied again without it, so the tenant's other projections go on, and
/// its failure is returned (recorded, and retried at the next catch-up with
/// every projector).
async fn catch_up(
    pool: &PgPool,
    engine: &Engine,
    tenant: &str,
    stopped: &watch::Receiver<bool>,
) -> Result<(), ProjectError> {
    let mut engine = std::borrow::Cow::Borrowed(engine);
    let mut failed: Option<ProjectError> = None;
    let done = |failed: Option<ProjectError>| failed.map_or(Ok(()), Err);
    loop {
        let step = match engine.step(pool, tenant).await {
            Ok(step) => step,
            Err(err) => match err.projector() {
                Some(name) if engine.projectors().len() > 1 => {
                    tracing::warn!(
                        tenant,
                        projector = name,
                        error = %err,
                        "a projection failed; the tenant's others go on without it"
                    );
                    let others: Vec<String> = engine
                        .projectors()
                        .iter()
                        .map(|p| p.name())
                        .filter(|other| *other != name)
                        .map(str::to_owned)
                        .collect();
                    engine = std::borrow::Cow::Owned(engine.only(&others)?);
                    failed.get_or_insert(err);
                    continue;
                }
                _ => return Err(failed.unwrap_or(err)),
            },
        };
        match step {
            // A short batch read everything committed when it began; what
            // committed since has announced itself and queued the tenant
            // again, so asking once more would only find nothing.
            Step::Advanced { from, to } if to - from < engine.batch_size() => return done(failed),
            Step::Advanced { .. } if !*stopped.borrow() => continue,
            Step::Gap { after, next } => {
                tracing::debug!(
                    tenant,
                    after,
                    next,
                    "waiting for an earlier event to commit"
                );
                return done(failed);
            }
            _ => return done(failed),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{Arc, Mutex},
        time::{Duration, Instant},
    };

    use sqlx::PgPool;
    use tokio::sync::watch;

    use super::{Queue, Work, work};
    use crate::{engine::ProjectError, projector::BoxFuture};

    /// Work that takes 5 ms per catch-up and notes when each began and
    /// ended; the first announces its tenant again meanwhile, as an append
    /// committing during a step does.
    struct Timed {
        queue: Arc<Queue>,
        calls: Mutex<Vec<(Instant, Instant)>>,
    }

    impl Work for Timed {
        fn label(&self) -> &'static str {
            "timed"
        }

        fn lagging<'a>(
            &'a self,
            _pool: &'a PgPool,
        ) -> BoxFuture<'a, Result<Vec<String>, sqlx::Error>> {
            Box::pin(async { Ok(Vec::new()) })
        }

        fn catch_up<'a>(
            &'a self,
            _pool: &'a PgPool,
            tenant: &'a str,
            _stopped: &'a watch::Receiver<bool>,
        ) -> BoxFuture<'a, Result<(), ProjectError>> {
            Box::pin(async move {
                let began = Instant::now();
                if self.calls.lock().unwrap().is_empty() {
                    self.queue.push(tenant.to_owned());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                self.calls.lock().unwrap().push((began, Instant::now()));
                Ok(())
            })
        }
    }

    #[tokio::test]
    async fn a_tenant_announced_during_its_step_waits_a_whole_gather_window_again() {
        let gather = Duration::from_millis(60);
        let queue = Arc::new(Queue::default());
        let timed = Arc::new(Timed {
            queue: queue.clone(),
            calls: Mutex::new(Vec::new()),
        });
        let pool = PgPool::connect_lazy("postgres://unused@127.0.0.1/unused").unwrap();
        let (stop, stopped) = watch::channel(false);
        let worker = tokio::spawn(work(pool, timed.clone(), queue.clone(), gather, stopped));

        let announced = Instant::now();
        queue.push("t".to_owned());
        let deadline = Instant::now() + Duration::from_secs(10);
        while timed.calls.lock().unwrap().len() < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop.send(true).unwrap();
        worker.await.unwrap();

        let calls = timed.calls.lock().unwrap();
        assert_eq!(
            calls.len(),
            2,
            "the tenant announced again is stepped again"
        );
        assert!(
            calls[0].0 - announced >= gather,
            "the first step waits for the window"
        );
        let between = calls[1].0 - calls[0].1;
        assert!(
            between >= gather,
            "the second step came {between:?} after the first, inside the {gather:?} window"
        );
    }

    #[test]
    fn tenants_are_served_in_arrival_order_once_each() {
        let queue = Queue::default();
        for tenant in ["b", "a", "b", "c", "a"] {
            queue.push(tenant.to_owned());
        }
        let order: Vec<_> = std::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(order, ["b", "a", "c"]);
        // Served tenants may queue again, behind those already waiting.
        queue.push("z".to_owned());
        queue.push("b".to_owned());
        assert_eq!(queue.pop().as_deref(), Some("z"));
        assert_eq!(queue.pop().as_deref(), Some("b"));
        assert_eq!(queue.pop(), None);
    }
}
