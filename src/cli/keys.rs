//! `memd key generate|public`.

use std::{io::Write, path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::Subcommand;
use memd_core::seal::Keyring;

use super::Globals;

#[derive(Subcommand)]
pub enum KeyCommand {
    /// Write a new random key file (mode 0600; never overwrites).
    Generate {
        #[arg(long)]
        out: PathBuf,
    },
    /// Print the key file's checkpoint public key (hex): what auditors
    /// trust checkpoints by.
    Public,
}

pub fn run(command: KeyCommand, globals: &Globals) -> anyhow::Result<ExitCode> {
    match command {
        KeyCommand::Generate { out } => {
            write_key_file(&out)?;
            println!("wrote {}: start memd with --key-file {0}", out.display());
        }
        KeyCommand::Public => match globals.keyring()?.public_key() {
            Some(public) => println!("{public}"),
            None => anyhow::bail!("no key file (--key-file, MEMD_KEY_FILE)"),
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes a new key file readable by its owner only, refusing to replace
/// one (a lost key loses what it sealed).
fn write_key_file(path: &std::path::Path) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).with_context(|| {
        format!(
            "creating key file {} (it must not exist yet)",
            path.display()
        )
    })?;
    file.write_all(Keyring::generate().as_bytes())?;
    file.sync_all()?;
    Ok(())
}
