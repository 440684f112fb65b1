//! The `memd` binary: reads the configuration file and the command line,
//! then runs the command (`src/cli/`, one module per command group).

mod cli;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use memd::{config::ConfigFile, telemetry};

/// A bundle allocates and frees thousands of small strings (candidate
/// ids, row fields); glibc's allocator spent a fifth of the daemon's time
/// on them under concurrent bundles, mimalloc much less (see
/// docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // The configuration file's values become the options' defaults: flags
    // and environment variables still win (memd::config).
    let (file, command) = match ConfigFile::locate(&args).and_then(|file| {
        let command = file.apply(cli::Cli::command())?;
        Ok((file, command))
    }) {
        Ok(found) => found,
        Err(err) => {
            eprintln!("memd: error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let cli =
        cli::Cli::from_arg_matches(&command.get_matches_from(&args)).unwrap_or_else(|e| e.exit());
    telemetry::init("info,sqlx=warn");
    match cli::run(cli, &file).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("memd: error: {err:#}");
            if let Some(hint) = cli::lock_timeout_hint(&err) {
                eprintln!("memd: gave up waiting for a lock: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}
