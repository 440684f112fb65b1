//! `memd config check`.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Subcommand};
use memd::{
    config::{ConfigFile, SemanticArgs},
    read::semantic::SemanticConfig,
};

use super::{Cli, Globals};

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Print what `memd serve` would run with (each option's value and
    /// where it came from: flag, environment, file or default; passwords
    /// masked), after checking the file and the key file.
    Check,
}

pub fn run(command: ConfigCommand, globals: &Globals, file: &ConfigFile) -> ExitCode {
    match command {
        ConfigCommand::Check => check(globals, file),
    }
}

/// The effective configuration of `memd serve`, and whether its key file
/// and model files are there.
fn check(globals: &Globals, file: &ConfigFile) -> ExitCode {
    let report = match memd::config::effective(Cli::command(), file, &["memd", "serve"]) {
        Ok(report) => report,
        Err(err) => {
            eprintln!("memd: error: {err}");
            return ExitCode::FAILURE;
        }
    };
    match &file.path {
        Some(path) => println!("# configuration file: {}", path.display()),
        None => println!("# no configuration file (--config or MEMD_CONFIG)"),
    }
    println!("# memd serve would run with (highest first: flag, env, file, default):");
    let width = report.iter().map(|e| e.name.len()).max().unwrap_or(0);
    for entry in &report {
        println!(
            "{:width$} = {}    ({})",
            entry.name, entry.value, entry.source
        );
    }
    let mut ok = true;
    if let Err(err) = globals.keyring() {
        eprintln!("memd: error: key file: {err:#}");
        ok = false;
    }
    match serve_semantic(file) {
        Ok(semantic) => {
            for (name, missing) in semantic.missing_models() {
                println!(
                    "# note: embedder {name}: no {}: memd serve would run without it, \
                     lexical retrieval only where it is the embedder ({})",
                    missing.display(),
                    SemanticConfig::FETCH_COMMAND
                );
            }
        }
        Err(err) => {
            eprintln!("memd: error: {err:#}");
            ok = false;
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The embedders `memd serve` would run with this file and environment,
/// read by the same parser.
fn serve_semantic(file: &ConfigFile) -> anyhow::Result<SemanticConfig> {
    let matches = file
        .apply(Cli::command())?
        .try_get_matches_from(["memd", "serve"])?;
    let serve = matches
        .subcommand_matches("serve")
        .expect("memd serve was parsed");
    SemanticArgs::from_arg_matches(serve)?.config()
}
