//! Logging setup, once per process. Logs go to stderr so that commands whose
//! stdout is their output (`memd tenant create`) stay clean.

use tracing_subscriber::{
    EnvFilter, Layer, Registry, filter::Targets, layer::SubscriberExt, util::SubscriberInitExt,
};

/// `RUST_LOG` overrides `default_filter`; directives that cannot be read
/// leave `default_filter` in force.
pub fn init(default_filter: &str) {
    let Some(filter) = std::env::var("RUST_LOG")
        .ok()
        .and_then(|directives| Filter::read(&directives))
        .or_else(|| Filter::read(default_filter))
    else {
        return;
    };
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(filter.layer())
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .try_init();
}

/// Levels by target when that is all the directives say (`info,sqlx=warn`),
/// otherwise an [`EnvFilter`], which can also filter by span and field.
/// `Targets` decides once per call site; an `EnvFilter` also takes a shared
/// lock on every entry into and exit from a span, and sqlx enters the
/// handler's span once per row it decodes: 4% of the daemon's CPU under 32
/// clients building retrieval bundles at 1M events.
#[derive(Debug)]
enum Filter {
    Targets(Targets),
    Env(Box<EnvFilter>),
}

impl Filter {
    fn read(directives: &str) -> Option<Filter> {
        // `Targets` would read `target[span]=level` as a target's name.
        if !directives.contains('[')
            && let Ok(targets) = directives.parse::<Targets>()
        {
            return Some(Filter::Targets(targets));
        }
        EnvFilter::try_new(directives)
            .ok()
            .map(|filter| Filter::Env(Box::new(filter)))
    }

    fn layer(self) -> Box<dyn Layer<Registry> + Send + Sync> {
        match self {
            Filter::Targets(targets) => Box::new(targets),
            Filter::Env(filter) => filter,
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::Filter;

    #[test]
    fn levels_by_target_are_targets_and_span_filters_an_env_filter() {
        let Some(Filter::Targets(targets)) = Filter::read("info,sqlx=warn") else {
            panic!("levels by target read as an EnvFilter");
        };
        assert!(targets.would_enable("memd::startup", &Level::INFO));
        assert!(!targets.would_enable("memd::startup", &Level::DEBUG));
        assert!(!targets.would_enable("sqlx::query", &Level::INFO));
        assert!(targets.would_enable("sqlx::query", &Level::WARN));
        assert!(matches!(
            Filter::read("info,memd[post_build]=debug"),
            Some(Filter::Env(_))
        ));
        assert!(Filter::read("info,sqlx=loud").is_none());
    }
}
