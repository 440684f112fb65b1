//! The daemon scenarios run against: one this process starts (and can
//! restart) on a database, or one already running at a URL.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use memd_core::seal::Keyring;
use sqlx::postgres::PgConnectOptions;

use crate::{
    db,
    scenario::spec::RestartStep,
    startup::{ProjectionConfig, RunningDaemon, ServeConfig},
};

pub enum Target {
    /// A daemon in this process on `connect`'s database, started anew on
    /// `restart` with a new connection pool and empty caches.
    Managed {
        connect: Box<PgConnectOptions>,
        /// Seals high memory and data subjects' content (erasure needs one).
        keyring: Keyring,
        daemon: Option<RunningDaemon>,
        /// Whether the running daemon projects.
        projecting: bool,
    },
    /// A daemon someone else runs. `restart` runs `restart_command` (a
    /// shell command) and waits for `/readyz`; without one it cannot. The
    /// command finds in [`RESTART_PROJECTORS_ENV`] whether the daemon it
    /// starts must project (`true`) or not (`false`: `memd serve
    /// --no-projectors`, for the scenarios of a daemon whose projections
    /// lag), and in [`RESTART_WARM_UP_ENV`] (0) when it must start cold.
    External {
        url: String,
        restart_command: Option<String>,
        /// Whether the daemon was last started projecting.
        projecting: bool,
    },
}

/// The environment variable that tells a black-box run's restart command
/// whether the daemon it starts must run projection workers.
pub const RESTART_PROJECTORS_ENV: &str = "MEMD_RESTART_PROJECTORS";

/// Set to 0 for a restart command whose daemon must start cold (a
/// `restart: {warm_up: false}` step): `memd serve` reads it as
/// `--warm-up-ms`, so a command that starts it in the environment it was
/// given needs nothing more.
pub const RESTART_WARM_UP_ENV: &str = "MEMD_WARM_UP_MS";

impl Target {
    /// A managed daemon on `connect` (migrated here), projecting, sealing
    /// with `keyring`.
    pub async fn managed(connect: PgConnectOptions, keyring: Keyring) -> anyhow::Result<Self> {
        let pool = db::connect(connect.clone(), 2).await?;
        db::migrate(&pool).await?;
        pool.close().await;
        let mut target = Target::Managed {
            connect: Box::new(connect),
            keyring,
            daemon: None,
            projecting: true,
        };
        target.restart(&RestartStep::default()).await?;
        Ok(target)
    }

    pub fn url(&self) -> &str {
        match self {
            Target::Managed { daemon, .. } => daemon
                .as_ref()
                .map(|d| d.base_url.as_str())
                .unwrap_or_default(),
            Target::External { url, .. } => url.trim_end_matches('/'),
        }
    }

    /// Why `restart` cannot run here, if it cannot.
    pub fn cannot_restart(&self) -> Option<&'static str> {
        match self {
            Target::External {
                restart_command: None,
                ..
            } => Some("restart needs a daemon the runner starts, or --restart-command"),
            _ => None,
        }
    }

    /// Stops the daemon (requests in flight finish) and starts another,
    /// projecting or not, warming up before it serves or not (cold:
    /// `warm_up` false), as `how` says.
    pub async fn restart(&mut self, how: &RestartStep) -> anyhow::Result<()> {
        let RestartStep {
            projectors,
            warm_up,
        } = *how;
        match self {
            Target::Managed {
                connect,
                keyring,
                daemon,
                projecting,
            } => {
                if let Some(running) = daemon.take() {
                    let pool = running.pool().clone();
                    running.stop().await?;
                    pool.close().await;
                }
                let pool = db::connect((**connect).clone(), 16).await?;
                let defaults = ServeConfig::default();
                let config = ServeConfig {
                    projection: projectors.then(ProjectionConfig::default),
                    keyring: keyring.clone(),
                    warm_up: if warm_up {
                        defaults.warm_up
                    } else {
                        Duration::ZERO
                    },
                    ..defaults
                };
                *daemon = Some(RunningDaemon::start(pool, config).await?);
                *projecting = projectors;
                Ok(())
            }
            Target::External {
                url,
                restart_command,
                projecting,
            } => {
                let Some(command) = restart_command else {
                    bail!("restart needs a daemon the runner starts, or --restart-command");
                };
                let command = command.clone();
                let status = tokio::task::spawn_blocking(move || {
                    let mut restart = std::process::Command::new("sh");
                    restart
                        .arg("-c")
                        .arg(command)
                        .env(RESTART_PROJECTORS_ENV, projectors.to_string());
                    if !warm_up {
                        restart.env(RESTART_WARM_UP_ENV, "0");
                    }
                    restart.status()
                })
                .await?
                .context("running the restart command")?;
                if !status.success() {
                    bail!("the restart command exited with {status}");
                }
                *projecting = projectors;
                wait_ready(url).await
            }
        }
    }

    /// Back to a projecting daemon, for the next scenario.
    pub async fn reset(&mut self) -> anyhow::Result<()> {
        if let Target::Managed {
            projecting: false, ..
        }
        | Target::External {
            projecting: false, ..
        } = self
        {
            self.restart(&RestartStep::default()).await?;
        }
        Ok(())
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        if let Target::Managed {
            daemon: Some(daemon),
            ..
        } = self
        {
            let pool = daemon.pool().clone();
            daemon.stop().await?;
            pool.close().await;
        }
        Ok(())
    }
}

async fn wait_ready(url: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = client
            .get(format!("{}/readyz", url.trim_end_matches('/')))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{url} was not ready within 60 s of the restart");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
