//! `memd scenario run`: the acceptance scenarios, against a daemon started
//! here or one already running. (`memd-bench` and `memd drill` parse their
//! own subcommands.)

use std::{path::PathBuf, process::ExitCode};

use clap::Subcommand;
use memd_core::seal::Keyring;

use memd::{db::ScratchDatabase, scenario};

use super::{Globals, connect};

#[derive(Subcommand)]
pub enum ScenarioCommand {
    /// Run scenario files (or every *.yaml of folders) and print a pass/fail
    /// table; exit 1 if any fails. Without --url, starts a daemon in this
    /// process on a fresh database on the server of --database-url (dropped
    /// afterwards unless --keep-database).
    Run {
        /// Scenario files or folders.
        #[arg(default_value = "scenarios")]
        paths: Vec<PathBuf>,
        /// A running daemon to test instead (black box over HTTP); then
        /// --database-url must be its database (tenants are created there
        /// and `no_secret_anywhere` scans it).
        #[arg(long)]
        url: Option<String>,
        /// With --url: a shell command that restarts that daemon, for
        /// scenarios with a `restart` step (skipped without one). It runs
        /// with MEMD_RESTART_PROJECTORS=true, or =false when the scenario
        /// needs a daemon without projection workers (`memd serve
        /// --no-projectors`).
        #[arg(long)]
        restart_command: Option<String>,
        /// Where to write the JSON report (default
        /// scenario-reports/run_<UTC time>.report.json).
        #[arg(long)]
        report: Option<PathBuf>,
        /// Keep the fresh database for inspection.
        #[arg(long)]
        keep_database: bool,
    },
}

pub async fn scenario(command: ScenarioCommand, globals: &Globals) -> anyhow::Result<ExitCode> {
    let ScenarioCommand::Run {
        paths,
        url,
        restart_command,
        report,
        keep_database,
    } = command;
    let keyring = globals.keyring()?;
    let files = scenario::files(&paths)?;
    let report_path = report.unwrap_or_else(|| {
        PathBuf::from(format!(
            "scenario-reports/run_{}.report.json",
            chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
        ))
    });
    let (run, scratch) = match url {
        Some(url) => {
            let pool = globals.connect(4).await?;
            let mut target = scenario::Target::External {
                url: url.clone(),
                restart_command,
                projecting: true,
            };
            let run = scenario::run_all(&mut target, &pool, &files, url).await;
            (run, None)
        }
        None => {
            let scratch = ScratchDatabase::create(&globals.database_url, "memd_scenarios").await?;
            let pool = connect(scratch.options.clone(), 4).await?;
            // The scratch database is dropped after the run: without a key
            // file, a key for this run alone seals it.
            let sealing = if keyring.is_on() {
                keyring
            } else {
                Keyring::ephemeral()
            };
            let mut target = scenario::Target::managed(scratch.options.clone(), sealing).await?;
            let described = format!(
                "a daemon started here on the fresh database {}",
                scratch.name
            );
            let run = scenario::run_all(&mut target, &pool, &files, described).await;
            target.stop().await?;
            pool.close().await;
            (run, Some(scratch))
        }
    };
    scenario::write_report(&run, &report_path)?;
    println!(
        "passed {}, failed {}, skipped {} in {:.1} s; report: {}",
        run.passed,
        run.failed,
        run.skipped,
        run.total_ms / 1000.0,
        report_path.display()
    );
    if let Some(scratch) = scratch {
        if keep_database {
            println!("database kept: {}", scratch.name);
        } else {
            scratch.drop_now().await?;
        }
    }
    Ok(if run.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
