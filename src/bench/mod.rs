//! `memd bench`: measurements of a real daemon on a fresh database, written
//! to a Markdown file together with the command that produced them.

mod append;
mod harness;

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Append throughput and latency: single and batched, 1 to 32 writers,
    /// beside raw PostgreSQL INSERTs measured in the same run.
    Append {
        /// Seconds each scenario runs.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Events per request in the batched scenarios.
        #[arg(long, default_value_t = 100)]
        batch: usize,
        /// Where to write the results.
        #[arg(long, default_value = "bench/append.md")]
        out: PathBuf,
    },
}

pub async fn run(command: BenchCommand, database_url: &str) -> anyhow::Result<()> {
    match command {
        BenchCommand::Append {
            seconds,
            batch,
            out,
        } => {
            append::run(
                database_url,
                std::time::Duration::from_secs_f64(seconds),
                batch,
                &out,
            )
            .await
        }
    }
}
