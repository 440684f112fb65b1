//! Logging setup, once per process. Logs go to stderr so that commands whose
//! stdout is their output (`memd tenant create`) stay clean.

use tracing_subscriber::EnvFilter;

/// `RUST_LOG` overrides `default_filter`.
pub fn init(default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
