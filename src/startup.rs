//! Building and running the daemon: bind first (so the real port is known
//! when asked for port 0), then serve until a stop future completes.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use memd_core::seal::Keyring;

use memd_projectors::{
    Engine,
    embed_worker::EmbeddingWork,
    notifications::Listener,
    projections::{
        self, Encoding,
        embeddings::{self, EmbeddingProjector},
    },
    runtime::{Runtime, RuntimeConfig},
};
use sqlx::PgPool;
use tokio::{
    net::TcpListener,
    sync::{oneshot, watch},
};

use crate::{
    admin::jobs::JobWorker,
    api,
    audit::checkpoint,
    calls::{
        ApiState,
        rate_limit::{RateLimiter, RateLimits},
    },
    domain::{limits, redact::Redactor},
    invalidation, mcp,
    metrics::Metrics,
    read::{
        Reader,
        replica::{Replica, ReplicaConfig},
        semantic::{Semantic, SemanticConfig},
    },
    tenants::TokenCache,
    write::{AppendPools, Appender},
};

/// What `memd serve` runs with, past parsing flags and environment.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to listen on; port 0 picks a free one.
    pub listen: String,
    pub max_body_bytes: usize,
    pub redactor: Arc<Redactor>,
    /// How long a resolved token is trusted before it is looked up again.
    pub token_cache_ttl: Duration,
    /// Projection workers and the admin job worker run inside the daemon
    /// unless this is `None` (`memd serve --no-projectors`, with `memd
    /// project` elsewhere).
    pub projection: Option<ProjectionConfig>,
    /// Token encoding of bundles; must be the projections' (chunks store
    /// their counts in it).
    pub encoding: Encoding,
    /// Per-tenant request and byte rates of this daemon.
    pub rate_limits: RateLimits,
    /// The tenants' default embedder and where model files are.
    pub semantic: SemanticConfig,
    /// Seals high and secret memory at rest (none: kept in the clear), and
    /// signs checkpoints.
    pub keyring: Keyring,
    /// How often each tenant's head is signed when it moved (with a key;
    /// zero: only `memd checkpoint`).
    pub checkpoint_interval: Duration,
    /// Where `GET /metrics` is served (its own listener, see
    /// [`crate::metrics`]); none: not served.
    pub metrics_listen: Option<String>,
    /// Per-tenant series in the metrics.
    pub metrics_tenant_labels: bool,
    /// A standby that bundles read (`--read-database-url`); none: the
    /// primary serves every read.
    pub read_replica: Option<ReplicaConfig>,
    /// How far ahead of this daemon's clock an event's `ts` may be (a
    /// client's clock skew); further is refused.
    pub max_clock_skew: Duration,
    /// Timeouts and the connection cap for HTTP clients.
    pub http: crate::serve::HttpLimits,
    /// How long the daemon may spend warming up before it serves
    /// ([`crate::read::warm`]); zero for none.
    pub warm_up: Duration,
}

/// How long serving waits for the caches' notification listener.
const LISTEN_WAIT: Duration = Duration::from_secs(5);

/// [`ServeConfig::warm_up`] unless told otherwise.
pub const DEFAULT_WARM_UP: Duration = Duration::from_secs(3);

/// How the projector runtime runs.
#[derive(Debug, Clone, Default)]
pub struct ProjectionConfig {
    pub runtime: RuntimeConfig,
    pub encoding: Encoding,
    /// Opens sealed events and seals the rows derived from them.
    pub keyring: Keyring,
}

impl ProjectionConfig {
    pub fn engine(&self) -> Engine {
        Engine::new(projections::all(self.encoding)).with_keyring(self.keyring.clone())
    }

    /// [`Self::engine`] plus the embeddings projections `names` asks for
    /// (`embeddings_<embedder>`), their embedders loaded from `models`:
    /// what `memd rebuild --projector embeddings_minilm` replays.
    pub fn engine_with_embeddings(
        &self,
        names: &[String],
        models: &memd_embedder::ModelDirs,
    ) -> anyhow::Result<Engine> {
        let mut projectors = projections::all(self.encoding);
        for name in memd_embedder::NAMES {
            let projector = embeddings::projector_name(name).expect("every embedder has a table");
            if names.iter().any(|n| n == projector) {
                let embedder = memd_embedder::load(name, models)?;
                projectors.push(Arc::new(
                    EmbeddingProjector::new(embedder).expect("every embedder has a table"),
                ));
            }
        }
        Ok(Engine::new(projectors).with_keyring(self.keyring.clone()))
    }

    /// Starts the workers on `pool`: the projections, and apart from them
    /// the embeddings of the embedders `semantic` runs, woken by `listener`.
    pub fn spawn(
        &self,
        pool: PgPool,
        semantic: &Semantic,
        listener: &mut Listener,
    ) -> Vec<Runtime> {
        let embedders: Vec<_> = semantic.embedders().values().cloned().collect();
        let embeddings = EmbeddingWork::new(semantic.default_embedder(), &embedders, &self.keyring);
        vec![
            Runtime::spawn_on(
                pool.clone(),
                Arc::new(self.engine()),
                self.runtime.clone(),
                listener,
            ),
            Runtime::spawn_on(
                pool,
                Arc::new(embeddings),
                RuntimeConfig {
                    // One worker: embedding already uses every core.
                    workers: 1,
                    ..self.runtime.clone()
                },
                listener,
            ),
        ]
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7070".into(),
            max_body_bytes: limits::DEFAULT_MAX_BODY_BYTES,
            redactor: Arc::new(Redactor::default()),
            token_cache_ttl: Duration::from_secs(5),
            projection: Some(ProjectionConfig::default()),
            encoding: Encoding::default(),
            rate_limits: RateLimits::default(),
            semantic: SemanticConfig::default(),
            keyring: Keyring::none(),
            checkpoint_interval: Duration::from_secs(300),
            metrics_listen: None,
            metrics_tenant_labels: false,
            read_replica: None,
            max_clock_skew: limits::DEFAULT_MAX_CLOCK_SKEW,
            http: crate::serve::HttpLimits::default(),
            warm_up: DEFAULT_WARM_UP,
        }
    }
}

/// A bound, not yet serving daemon.
pub struct Daemon {
    listener: TcpListener,
    router: axum::Router,
    /// The metrics listener and its routes, when metrics are served.
    metrics: Option<(TcpListener, axum::Router)>,
    pool: PgPool,
    /// The pool of single-event appends without an idempotency key
    /// ([`crate::db::for_appends`]), closed when serving ends.
    appends: PgPool,
    projection: Option<ProjectionConfig>,
    reader: Arc<Reader>,
    tokens: Arc<TokenCache>,
    checkpoint_interval: Duration,
    /// Where the checkpoint signer raises its alarms.
    counters: Arc<Metrics>,
    http: crate::serve::HttpLimits,
    /// How long [`Daemon::run`] may warm up before it serves.
    warm_up: Duration,
    /// Told when requests start being served.
    serving: watch::Sender<bool>,
}

impl Daemon {
    pub async fn bind(config: &ServeConfig, pool: PgPool) -> std::io::Result<Self> {
        let listener = TcpListener::bind(&config.listen).await?;
        let appends = crate::db::for_appends(&pool);
        let semantic = Arc::new(Semantic::load(&config.semantic));
        let reader = Arc::new(Reader::new(
            pool.clone(),
            config.encoding,
            semantic,
            config.keyring.clone(),
        ));
        let metrics = Arc::new(Metrics::new(
            config.metrics_tenant_labels,
            pool.options().get_max_connections(),
        ));
        let metrics_listener = match &config.metrics_listen {
            Some(address) => {
                let listener = TcpListener::bind(address).await?;
                let projectors = scraped_projectors(config.encoding, &reader.semantic);
                // A connection of its own: a scrape must answer when the
                // daemon's pool is saturated, which is when it matters.
                let scrape_pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_lazy_with((*pool.connect_options()).clone());
                let router = crate::metrics::router(
                    metrics.clone(),
                    scrape_pool,
                    pool.clone(),
                    appends.clone(),
                    projectors,
                );
                Some((listener, router))
            }
            None => None,
        };
        let tokens = Arc::new(TokenCache::new(
            config.token_cache_ttl,
            metrics.token_invalidations.clone(),
        ));
        let replica = config
            .read_replica
            .clone()
            .map(|replica| Arc::new(Replica::start(&reader, replica, metrics.clone())));
        let state = ApiState {
            replica,
            reader: reader.clone(),
            appender: Arc::new(Appender::new(
                AppendPools {
                    by_values: pool.clone(),
                    planned_once: appends.clone(),
                },
                config.keyring.clone(),
            )),
            pool: pool.clone(),
            redactor: config.redactor.clone(),
            tokens: tokens.clone(),
            limiter: Arc::new(RateLimiter::new(config.rate_limits)),
            max_clock_skew: config.max_clock_skew,
            metrics: metrics.clone(),
        };
        Ok(Self {
            listener,
            metrics: metrics_listener,
            router: api::router(
                state.clone(),
                config.max_body_bytes,
                config.http.body_read_timeout,
                mcp::service(state, config.max_body_bytes),
            ),
            http: config.http,
            pool,
            appends,
            // One key for the whole daemon: what it appends, projects and reads.
            projection: config
                .projection
                .clone()
                .map(|projection| ProjectionConfig {
                    keyring: config.keyring.clone(),
                    ..projection
                }),
            reader,
            tokens,
            checkpoint_interval: config.checkpoint_interval,
            counters: metrics,
            warm_up: config.warm_up,
            serving: watch::channel(false).0,
        })
    }

    /// Becomes true when [`Daemon::run`] starts serving requests, after
    /// its warm-up; a request sent before waits in the listen backlog.
    pub fn serving(&self) -> watch::Receiver<bool> {
        self.serving.subscribe()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Where `GET /metrics` is served, when it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|(listener, _)| {
            listener
                .local_addr()
                .expect("a bound listener has an address")
        })
    }

    /// Serves (and projects, unless configured not to) until `stop`
    /// completes, then stops accepting and lets requests in flight finish (an
    /// append that started is committed and answered) and projection workers
    /// finish their batch.
    pub async fn run(self, stop: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        tracing::info!(addr = %self.local_addr(), "memd listening");
        let mut listener = Listener::default();
        let workers = self.projection.map(|p| {
            (
                p.spawn(self.pool.clone(), &self.reader.semantic, &mut listener),
                JobWorker::spawn(self.pool.clone(), Arc::new(p.engine()), &mut listener),
            )
        });
        let (caches_listening, mut caches_told) = watch::channel(false);
        let caches = tokio::spawn(invalidation::subscribe(
            &mut listener,
            vec![self.reader.cache.clone(), self.tokens.clone()],
            caches_listening,
        ));
        let (stop_listening, listening) = watch::channel(false);
        let notifications = listener.spawn(self.pool.clone(), listening);
        // Requests are served once the caches hear notifications: what a
        // bundle cached before would be dropped when the listener first
        // listens (the next bundle missing it), and could have missed a
        // change announced meanwhile. Bounded: a database that will not
        // take the listener's connection must not keep the daemon from
        // serving (its caches are then dropped when it does connect).
        let _ = tokio::time::timeout(LISTEN_WAIT, caches_told.wait_for(|told| *told)).await;
        // Before the first request, not in it: connections, plans, the
        // recent tenants' state and their vector indexes (a failure only
        // costs the warmth). After the caches listen, so that what the
        // warm-up cached is kept right like anything a bundle caches.
        let started = std::time::Instant::now();
        match crate::read::warm::warm(&self.reader, self.warm_up).await {
            Ok(warmed) if warmed.tenants > 0 => tracing::info!(
                tenants = warmed.tenants,
                bundles = warmed.bundles,
                still_loading = warmed.still_loading,
                ms = started.elapsed().as_millis() as u64,
                "warmed up"
            ),
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %err, "warming up failed; serving cold"),
        }
        let metrics = self.metrics.map(|(listener, router)| {
            tracing::info!(addr = %listener.local_addr().expect("bound"), "metrics listening");
            let mut stopped = stop_listening.subscribe();
            tokio::spawn(async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.changed().await;
                    })
                    .await
            })
        });
        let checkpoints = (self.reader.keyring.is_on() && !self.checkpoint_interval.is_zero())
            .then(|| {
                tokio::spawn(take_checkpoints(
                    self.pool.clone(),
                    self.reader.keyring.clone(),
                    self.checkpoint_interval,
                    self.counters.clone(),
                    stop_listening.subscribe(),
                ))
            });
        self.serving.send_replace(true);
        let served = crate::serve::serve(self.listener, self.router, self.http, stop).await;
        let _ = stop_listening.send(true);
        let _ = notifications.await;
        let _ = caches.await;
        if let Some(metrics) = metrics {
            let _ = metrics.await;
        }
        if let Some(checkpoints) = checkpoints {
            let _ = checkpoints.await;
        }
        if let Some((projectors, jobs)) = workers {
            jobs.shutdown().await;
            for runtime in projectors {
                runtime.shutdown().await;
            }
        }
        self.appends.close().await;
        served
    }
}

/// The projections whose lag the metrics report: the engine's, and the
/// embeddings projections of the embedders this daemon runs, with their
/// current versions.
fn scraped_projectors(encoding: Encoding, semantic: &Semantic) -> Vec<(String, i32)> {
    let mut projectors: Vec<(String, i32)> = projections::all(encoding)
        .iter()
        .map(|p| (p.name().to_owned(), p.version()))
        .collect();
    let mut embedders: Vec<&str> = semantic.embedders().keys().copied().collect();
    embedders.sort_unstable();
    for name in embedders {
        if let (Some(projector), Some(version)) = (
            embeddings::projector_name(name),
            embeddings::projector_version(name),
        ) {
            projectors.push((projector.to_owned(), version));
        }
    }
    projectors
}

/// Signs every tenant's head every `interval` until `stopped` (a head
/// already signed is not signed again). Several daemons may do it: one
/// signature per head is kept. A head the log no longer proves to extend
/// the newest checkpoint is not signed: the refusal is counted in the
/// metrics and shown by `/readyz` until that tenant is signed again.
async fn take_checkpoints(
    pool: PgPool,
    keyring: Keyring,
    interval: Duration,
    alarms: Arc<Metrics>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            () = tokio::time::sleep(interval) => {}
        }
        match checkpoint::take(&pool, &keyring, None).await {
            Ok(taken) => {
                for signed in &taken.signed {
                    alarms.checkpoint_signed(&signed.tenant);
                }
                for refused in &taken.refused {
                    alarms.checkpoint_refused(&refused.tenant, &refused.reason);
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "taking checkpoints failed; trying again later");
            }
        }
    }
}

/// Completes on SIGINT (ctrl-c) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown requested; finishing requests in flight");
}

/// A daemon serving in this process on a free local port, until stopped:
/// what benchmarks and the scenario runner drive over HTTP.
pub struct RunningDaemon {
    pub base_url: String,
    pool: PgPool,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningDaemon {
    /// Binds `config` on a free local port (whatever its `listen`) and
    /// serves in a task of this runtime.
    pub async fn start(pool: PgPool, config: ServeConfig) -> anyhow::Result<Self> {
        let config = ServeConfig {
            listen: "127.0.0.1:0".into(),
            ..config
        };
        let daemon = Daemon::bind(&config, pool.clone()).await?;
        let base_url = format!("http://{}", daemon.local_addr());
        let mut serving = daemon.serving();
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(daemon.run(async {
            let _ = stopped.await;
        }));
        // Returned once it serves: what the caller times starts with a
        // daemon that has warmed up, as one restarted in production would
        // have before its clients reconnect. A run that ended early drops
        // the sender, which ends the wait too.
        let _ = serving.wait_for(|serving| *serving).await;
        Ok(Self {
            base_url,
            pool,
            stop: Some(stop),
            task,
        })
    }

    /// Stops serving (requests in flight finish). The pool stays open: it
    /// is the caller's.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await??;
        Ok(())
    }

    /// The pool it serves from.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}
