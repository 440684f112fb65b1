//! `memd-bench`, the lab: measurements of a real daemon on a fresh
//! database, each written to a Markdown file (with an SVG plot beside it)
//! together with the command that produced it. Not part of the daemon:
//! `cargo tree -p memd` holds none of this crate's dependencies.

mod acb;
mod append;
mod browser;
mod charts;
mod console;
mod cpu;
mod harness;
mod locomo;
mod project;
mod redaction;
mod scale;
mod transfer;
mod vectors;
mod workers;

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use memd::scenario::histories;

/// The daemon runs inside this process while it is measured: with the
/// allocator `memd` runs with, so the figures are the daemon's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "memd-bench",
    version,
    about = "Measure memd against the raw PostgreSQL it runs on"
)]
struct Cli {
    /// A PostgreSQL server's URL: each benchmark creates its own scratch
    /// database there (and drops it afterwards).
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/memd",
        global = true
    )]
    database_url: String,
    #[command(subcommand)]
    command: BenchCommand,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    memd::telemetry::init("info,sqlx=warn");
    match run(cli.command, &cli.database_url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("memd-bench: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The console's pages timed on a large tenant: what each asks the
    /// daemon for, and (with chromedriver installed) each in Chromium.
    Console {
        /// Events in the tenant's chat history.
        #[arg(long, default_value_t = 100_000)]
        size: u64,
        /// Loads of each page measured.
        #[arg(long, default_value_t = 50)]
        repeats: usize,
        #[arg(long, default_value = "lab/results/console.md")]
        out: PathBuf,
    },
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
        #[arg(long, default_value = "lab/results/append.md")]
        out: PathBuf,
        /// Run the daemon without its projectors, to see what they cost
        /// the appends they run beside.
        #[arg(long)]
        without_projections: bool,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// Projection lag under a steady append rate, and rebuild throughput at
    /// growing history sizes.
    Project {
        /// Target append rate for the lag measurement, events/s.
        #[arg(long, default_value_t = 1000)]
        rate: u32,
        /// Seconds of steady load.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// History sizes to rebuild, comma-separated (each loads on top of the previous).
        #[arg(long, value_delimiter = ',', default_value = "100000,1000000")]
        sizes: Vec<u64>,
        /// Chat-history sizes at which the embeddings projection is also
        /// rebuilt from zero (embedding throughput); `0` for none.
        #[arg(long, value_delimiter = ',', default_value = "100000")]
        embed_sizes: Vec<u64>,
        /// Where to write the results.
        #[arg(long, default_value = "lab/results/project.md")]
        out: PathBuf,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// Bundle latency: fast path, retrieval path and cold cache, with 1 and
    /// 32 clients, as one tenant's history grows.
    Acb {
        /// History sizes, comma-separated (each loads on top of the previous).
        #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
        sizes: Vec<u64>,
        /// Seconds each warm scenario runs.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Daemon restarts measured for the cold-cache first bundle, per size.
        #[arg(long, default_value_t = 20)]
        restarts: usize,
        /// `max_tokens` of every bundle.
        #[arg(long, default_value_t = 65_000)]
        max_tokens: u32,
        /// Keep the history in this database (created if missing) instead
        /// of a scratch one dropped at the end; a later run with the same
        /// name loads only what is missing (embedding 100k events takes
        /// a quarter of an hour here).
        #[arg(long)]
        keep_database: Option<String>,
        /// Where to write the results.
        #[arg(long, default_value = "lab/results/acb.md")]
        out: PathBuf,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// The in-process vector index alone: memory and search time at
    /// `--count` vectors of 384 dimensions (pseudo-random unit vectors).
    Vectors {
        #[arg(long, default_value_t = 1_000_000)]
        count: usize,
        /// Searches timed.
        #[arg(long, default_value_t = 200)]
        searches: usize,
        #[arg(long, default_value = "lab/results/vectors.md")]
        out: PathBuf,
        /// The embedder whose question vectors are timed too (none: skip).
        #[command(flatten)]
        embedder: EmbedderArgs,
        /// Search this tenant's real vectors, read from the embeddings
        /// projection of `--embedder` in DATABASE_URL, instead of
        /// pseudo-random ones (`--count` is then ignored).
        #[arg(long)]
        tenant: Option<String>,
        /// Rows from which the index reads lists instead of every row (a
        /// power of two; the daemon's is 262144): lists on a smaller tenant.
        #[arg(long)]
        lists_from: Option<usize>,
    },
    /// `memd export` and `memd import` of one tenant's chat history: rates,
    /// file size, and the imported chain verified.
    Transfer {
        /// Events in the history.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        #[arg(long, default_value = "lab/results/transfer.md")]
        out: PathBuf,
    },
    /// Whether costs stay flat as the log grows: one log over several
    /// tenants loaded to each size; appends, bundles, a tenant's rebuild
    /// and verify at each.
    Scale {
        /// Total events of the log at each measurement, ascending.
        #[arg(long, value_delimiter = ',', default_value = "100000,1000000,10000000")]
        sizes: Vec<u64>,
        /// Tenants the log is spread over.
        #[arg(long, default_value_t = 10)]
        tenants: usize,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Keep the log in this database between runs (created if
        /// missing); a later run loads only what is missing.
        #[arg(long)]
        keep_database: Option<String>,
        #[arg(long, default_value = "lab/results/scale.md")]
        out: PathBuf,
    },
    /// Projection shared by several `memd project` processes: throughput
    /// with each number of processes over many tenants, and `kill -9` of
    /// one of two: how soon the other takes its tenants over.
    Workers {
        /// Tenants written for each run.
        #[arg(long, default_value_t = 100)]
        tenants: usize,
        /// Events in each tenant's log.
        #[arg(long, default_value_t = 3000)]
        events: u64,
        /// Numbers of processes, a run for each.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
        processes: Vec<usize>,
        #[arg(long, default_value = "lab/results/workers.md")]
        out: PathBuf,
    },
    /// Retrieval quality on LoCoMo conversations (recall of evidence turns
    /// in 2,000-token bundles), beside a plain BM25 baseline.
    Locomo {
        /// A directory of LoCoMo conversation files (`*.json`); none ships
        /// in this repository: put them in `lab/data/locomo/` (ignored by
        /// git) or name another folder.
        #[arg(long, default_value = "lab/data/locomo")]
        dir: PathBuf,
        /// locomo_kit.py, to cross-check the recall it computes (skipped
        /// when not given).
        #[arg(long)]
        kit: Option<PathBuf>,
        /// Where to write the results (rankings go to `<out>.results/`).
        #[arg(long, default_value = "lab/results/locomo.md")]
        out: PathBuf,
        /// Recall at scale: each conversation is also recorded into a
        /// tenant already holding this many events of other history (half
        /// chat, half tool output), one row per size; 0 for none.
        #[arg(long, value_delimiter = ',', default_value = "10000")]
        history: Vec<u64>,
        /// The quality tier's embedder, measured beside the default (its
        /// model files must be there: ops/fetch-model.sh mpnet); none to
        /// skip.
        #[arg(long, default_value = "mpnet")]
        quality_embedder: String,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// How often secret redaction fires on ordinary chat and code, by
    /// pattern, with examples: its false positives.
    Redaction {
        /// A directory of LoCoMo conversation files (`*.json`): ordinary
        /// chat (none ships in this repository: put them in
        /// `lab/data/locomo/`, ignored by git, or name another folder).
        #[arg(long, default_value = "lab/data/locomo")]
        dir: PathBuf,
        /// A source tree (this repository by default).
        #[arg(long, default_value = ".")]
        source: PathBuf,
        #[arg(long, default_value = "lab/results/redaction.md")]
        out: PathBuf,
    },
}

/// The embedder a benchmark's daemon runs.
use memd::config::SemanticArgs as EmbedderArgs;

async fn run(command: BenchCommand, database_url: &str) -> anyhow::Result<()> {
    match command {
        BenchCommand::Console { size, repeats, out } => {
            console::run(database_url, size, repeats, &out).await
        }
        BenchCommand::Append {
            seconds,
            batch,
            out,
            without_projections,
            embedder,
        } => {
            append::run(
                database_url,
                std::time::Duration::from_secs_f64(seconds),
                batch,
                embedder.config()?,
                !without_projections,
                &out,
            )
            .await
        }
        BenchCommand::Project {
            rate,
            seconds,
            sizes,
            embed_sizes,
            out,
            embedder,
        } => {
            project::run(
                database_url,
                project::Options {
                    rate,
                    seconds,
                    sizes,
                    embed_sizes,
                    semantic: embedder.config()?,
                },
                &out,
            )
            .await
        }
        BenchCommand::Acb {
            sizes,
            seconds,
            restarts,
            max_tokens,
            keep_database,
            out,
            embedder,
        } => {
            acb::run(
                database_url,
                acb::Options {
                    sizes,
                    seconds,
                    restarts,
                    max_tokens,
                    keep_database,
                    semantic: embedder.config()?,
                },
                &out,
            )
            .await
        }
        BenchCommand::Vectors {
            count,
            searches,
            out,
            embedder,
            tenant,
            lists_from,
        } => {
            vectors::run(
                vectors::Options {
                    count,
                    searches,
                    tenant,
                    lists_from,
                },
                database_url,
                &embedder.config()?,
                &out,
            )
            .await
        }
        BenchCommand::Transfer { events, out } => transfer::run(database_url, events, &out).await,
        BenchCommand::Scale {
            sizes,
            tenants,
            seconds,
            keep_database,
            out,
        } => {
            scale::run(
                database_url,
                scale::Options {
                    sizes,
                    tenants,
                    seconds,
                    keep_database,
                },
                &out,
            )
            .await
        }
        BenchCommand::Workers {
            tenants,
            events,
            processes,
            out,
        } => {
            workers::run(
                database_url,
                workers::Options {
                    tenants,
                    events,
                    processes,
                },
                &out,
            )
            .await
        }
        BenchCommand::Locomo {
            dir,
            kit,
            out,
            history,
            quality_embedder,
            embedder,
        } => {
            let semantic = embedder.config()?;
            let quality = match quality_embedder.as_str() {
                "none" => None,
                name => Some(
                    memd::admin::embedder::known(name)
                        .map_err(|e| anyhow::anyhow!("--quality-embedder: {}", e.message))?
                        .to_owned(),
                ),
            };
            let history = history.into_iter().filter(|size| *size > 0).collect();
            locomo::run(
                database_url,
                locomo::Options {
                    dir,
                    kit,
                    history,
                    semantic,
                    quality,
                },
                &out,
            )
            .await
        }
        BenchCommand::Redaction { dir, source, out } => {
            redaction::run(redaction::Options { dir, source }, &out)
        }
    }
}
