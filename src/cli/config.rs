//! `memd config check`.

use std::process::ExitCode;

use clap::{CommandFactory, Subcommand};
use memd::{config::ConfigFile, read::semantic::SemanticConfig};

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
    if let Some(model_dir) = report.iter().find(|e| e.name == "model-dir")
        && !std::path::Path::new(&model_dir.value)
            .join("model.safetensors")
            .is_file()
    {
        println!(
            "# note: no model in {}: semantic retrieval would be off ({})",
            model_dir.value,
            SemanticConfig::FETCH_COMMAND
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
