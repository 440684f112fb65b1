//! Configuration from a file, beside flags and environment variables, with
//! one source of truth: the command line's own definitions.
//!
//! The file (`--config FILE` or `MEMD_CONFIG`) is YAML: a flat map from
//! option names (as the flags spell them, `db-connections` or
//! `db_connections`) to values. Each value becomes that option's default,
//! so the precedence is, highest first: **flag, environment variable,
//! file, built-in default**. A key that is no option of any memd command is
//! an error naming it (a typo must not be silently ignored); a key of
//! another command (`listen` when running `memd migrate`) does nothing.
//! Values are checked by the same parsers as flags.
//!
//! `memd config check` prints what `memd serve` would run with, each value
//! with where it came from, secrets masked.

use std::{collections::BTreeMap, ffi::OsString, path::PathBuf};

use clap::{Arg, ArgMatches, Command, parser::ValueSource};

/// The option naming the file, and its environment variable.
pub const CONFIG_FLAG: &str = "config";
pub const CONFIG_ENV: &str = "MEMD_CONFIG";

/// A configuration file, read.
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    pub path: Option<PathBuf>,
    /// Option id (`db_connections`) → value, as text.
    values: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: `{key}` is not an option of any memd command")]
    UnknownKey { path: String, key: String },
}

impl ConfigFile {
    /// The file `args` (`--config FILE`, `--config=FILE`) or the
    /// environment (`MEMD_CONFIG`) names, read; none named, an empty one.
    pub fn locate(args: &[OsString]) -> Result<Self, ConfigError> {
        let flag = format!("--{CONFIG_FLAG}");
        let prefixed = format!("--{CONFIG_FLAG}=");
        let mut named = None;
        let mut args = args.iter().map(|a| a.to_string_lossy());
        while let Some(arg) = args.next() {
            if arg == flag {
                named = args.next().map(|v| PathBuf::from(v.as_ref()));
            } else if let Some(value) = arg.strip_prefix(&prefixed) {
                named = Some(PathBuf::from(value));
            }
        }
        let named = named.or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from));
        match named {
            Some(path) => Self::read(path),
            None => Ok(Self::default()),
        }
    }

    pub fn read(path: PathBuf) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        let mut file = Self::parse(&text).map_err(|message| ConfigError::Parse {
            path: shown,
            message,
        })?;
        file.path = Some(path);
        Ok(file)
    }

    /// A flat YAML map of scalars; an empty document is an empty file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let map: Option<BTreeMap<String, serde_json::Value>> =
            serde_saphyr::from_str(text).map_err(|err| err.to_string())?;
        let mut values = BTreeMap::new();
        for (key, value) in map.unwrap_or_default() {
            let text = match value {
                serde_json::Value::String(s) => s,
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                other => {
                    return Err(format!(
                        "`{key}`: expected a string, number or boolean, not {other}"
                    ));
                }
            };
            values.insert(key.replace('-', "_"), text);
        }
        Ok(Self { path: None, values })
    }

    fn shown_path(&self) -> String {
        self.path.as_ref().map_or_else(
            || "the configuration".to_owned(),
            |p| p.display().to_string(),
        )
    }

    /// `command` with the file's values as the defaults of the options
    /// they name, in every subcommand that has them.
    pub fn apply(&self, command: Command) -> Result<Command, ConfigError> {
        for key in self.values.keys() {
            if !has_option(&command, key) {
                return Err(ConfigError::UnknownKey {
                    path: self.shown_path(),
                    key: key.clone(),
                });
            }
        }
        Ok(with_defaults(command, &self.values))
    }

    fn holds(&self, arg: &Arg) -> bool {
        self.values.keys().any(|key| sets(key, arg))
    }
}

/// Whether the file's `key` (dashes read as underscores) sets `arg`: by its
/// long name (`also_embedders` for `--also-embedders`) or by its id.
fn sets(key: &str, arg: &Arg) -> bool {
    !arg.is_positional()
        && (arg.get_id() == key
            || arg
                .get_long()
                .is_some_and(|long| long.replace('-', "_") == key))
}

fn has_option(command: &Command, key: &str) -> bool {
    command.get_arguments().any(|arg| sets(key, arg))
        || command.get_subcommands().any(|sub| has_option(sub, key))
}

fn with_defaults(mut command: Command, values: &BTreeMap<String, String>) -> Command {
    for (key, value) in values {
        let Some(id) = command
            .get_arguments()
            .find(|arg| sets(key, arg))
            .map(|arg| arg.get_id().clone())
        else {
            continue;
        };
        // Read once at start; clap keeps defaults for the process's life.
        let value: &'static str = Box::leak(value.clone().into_boxed_str());
        command = command.mut_arg(id, |arg| arg.default_value(value));
    }
    let names: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    for name in names {
        command = command.mut_subcommand(name, |sub| with_defaults(sub, values));
    }
    command
}

/// One option of `memd config check`'s report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    /// As the flag spells it (`db-connections`).
    pub name: String,
    /// Its value, secrets masked; `(unset)` when none.
    pub value: String,
    /// `flag`, `env NAME`, `file PATH` or `default`.
    pub source: String,
}

/// What `args` (a command line, `["memd", "serve"]`) runs with, for every
/// option of the command it names and the global ones.
pub fn effective(
    command: Command,
    file: &ConfigFile,
    args: &[&str],
) -> Result<Vec<Effective>, String> {
    let command = file.apply(command).map_err(|err| err.to_string())?;
    let matches = command
        .clone()
        .try_get_matches_from(args)
        .map_err(|err| err.to_string())?;
    let mut report = Vec::new();
    describe(&command, &matches, file, &mut report);
    // The subcommand's options (and their globals, read there).
    let mut command = &command;
    let mut matches = &matches;
    while let Some((name, sub_matches)) = matches.subcommand() {
        let Some(sub) = command.find_subcommand(name) else {
            break;
        };
        describe(sub, sub_matches, file, &mut report);
        (command, matches) = (sub, sub_matches);
    }
    report.sort_by(|a, b| a.name.cmp(&b.name));
    report.dedup_by(|a, b| a.name == b.name);
    Ok(report)
}

fn describe(command: &Command, matches: &ArgMatches, file: &ConfigFile, out: &mut Vec<Effective>) {
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if arg.is_positional() || matches!(id, "help" | "version") || id == CONFIG_FLAG {
            continue;
        }
        let Ok(raw) = matches.try_get_raw(id) else {
            continue;
        };
        let value = raw
            .map(|values| {
                values
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .map_or_else(|| "(unset)".to_owned(), |v| mask(id, &v));
        let source = match matches.value_source(id) {
            Some(ValueSource::CommandLine) => "flag".to_owned(),
            Some(ValueSource::EnvVariable) => format!(
                "env {}",
                arg.get_env()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
            Some(ValueSource::DefaultValue) if file.holds(arg) => {
                format!("file {}", file.shown_path())
            }
            _ => "default".to_owned(),
        };
        out.push(Effective {
            name: arg.get_long().unwrap_or(id).to_owned(),
            value,
            source,
        });
    }
}

/// A value as it may be shown: a URL's password and anything named like a
/// secret are masked.
pub fn mask(id: &str, value: &str) -> String {
    let lowered = id.to_ascii_lowercase();
    if lowered.contains("password") || lowered.contains("secret") || lowered.ends_with("token") {
        return "****".to_owned();
    }
    // scheme://user:password@host...
    if let Some((scheme, rest)) = value.split_once("://")
        && let Some((credentials, host)) = rest.split_once('@')
        && let Some((user, _password)) = credentials.split_once(':')
    {
        return format!("{scheme}://{user}:****@{host}");
    }
    value.to_owned()
}

#[cfg(test)]
mod tests {
    use clap::{Arg, ArgAction};

    use super::*;

    fn command() -> Command {
        Command::new("memd")
            .arg(
                Arg::new("database_url")
                    .long("database-url")
                    .env("MEMD_TEST_CONFIG_DATABASE_URL")
                    .default_value("postgres://localhost/memd")
                    .global(true),
            )
            .subcommand(
                Command::new("serve")
                    .arg(
                        Arg::new("listen")
                            .long("listen")
                            .env("MEMD_TEST_CONFIG_LISTEN")
                            .default_value("127.0.0.1:7070"),
                    )
                    .arg(
                        Arg::new("db_connections")
                            .long("db-connections")
                            .value_parser(clap::value_parser!(u32))
                            .default_value("16"),
                    )
                    .arg(
                        Arg::new("no_projectors")
                            .long("no-projectors")
                            .action(ArgAction::SetTrue),
                    )
                    // Its id is not its long name (SemanticArgs::also).
                    .arg(Arg::new("also").long("also-embedders").value_delimiter(',')),
            )
            .subcommand(Command::new("migrate"))
    }

    fn file(text: &str) -> ConfigFile {
        ConfigFile {
            path: Some("memd.yaml".into()),
            ..ConfigFile::parse(text).unwrap()
        }
    }

    fn find<'a>(report: &'a [Effective], name: &str) -> &'a Effective {
        report.iter().find(|e| e.name == name).unwrap()
    }

    #[test]
    fn flags_beat_the_environment_which_beats_the_file_which_beats_defaults() {
        let config = file("listen: 0.0.0.0:9000\ndb-connections: 32\nno_projectors: true\n");
        let report = effective(command(), &config, &["memd", "serve"]).unwrap();
        assert_eq!(find(&report, "listen").value, "0.0.0.0:9000");
        assert_eq!(find(&report, "listen").source, "file memd.yaml");
        assert_eq!(find(&report, "db-connections").value, "32");
        assert_eq!(find(&report, "no-projectors").value, "true");
        assert_eq!(find(&report, "database-url").source, "default");
        let report = effective(
            command(),
            &config,
            &["memd", "serve", "--listen", "10.0.0.1:7070"],
        )
        .unwrap();
        assert_eq!(find(&report, "listen").value, "10.0.0.1:7070");
        assert_eq!(find(&report, "listen").source, "flag");
        // SAFETY (of the test): no other test reads this variable.
        unsafe { std::env::set_var("MEMD_TEST_CONFIG_LISTEN", "10.0.0.2:7070") };
        let report = effective(command(), &config, &["memd", "serve"]).unwrap();
        unsafe { std::env::remove_var("MEMD_TEST_CONFIG_LISTEN") };
        assert_eq!(find(&report, "listen").value, "10.0.0.2:7070");
        assert_eq!(
            find(&report, "listen").source,
            "env MEMD_TEST_CONFIG_LISTEN"
        );
    }

    /// A file names an option as its flag does (`also-embedders`), even
    /// when the option's id is another word (`also`).
    #[test]
    fn a_file_key_is_the_flags_long_name() {
        for text in ["also-embedders: mpnet\n", "also_embedders: mpnet\n"] {
            let report = effective(command(), &file(text), &["memd", "serve"]).unwrap();
            assert_eq!(find(&report, "also-embedders").value, "mpnet", "{text}");
            assert_eq!(
                find(&report, "also-embedders").source,
                "file memd.yaml",
                "{text}"
            );
        }
    }

    #[test]
    fn an_unknown_key_or_a_bad_value_is_an_error_naming_it() {
        let err = file("lisen: 0.0.0.0:9000\n").apply(command()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "memd.yaml: `lisen` is not an option of any memd command"
        );
        let err = effective(
            command(),
            &file("db_connections: many\n"),
            &["memd", "serve"],
        )
        .unwrap_err();
        assert!(
            err.contains("many") && err.contains("db-connections"),
            "{err}"
        );
        assert!(
            ConfigFile::parse("listen: [1, 2]\n")
                .unwrap_err()
                .contains("listen")
        );
        assert!(ConfigFile::parse("").unwrap().values.is_empty());
        // A key of another command does nothing here.
        let report = effective(
            command(),
            &file("listen: 0.0.0.0:1\n"),
            &["memd", "migrate"],
        );
        assert!(report.unwrap().iter().all(|e| e.name != "listen"));
    }

    #[test]
    fn passwords_are_masked() {
        let config = file("database_url: postgres://memd:hunter2@db:5432/memd\n");
        let report = effective(command(), &config, &["memd", "serve"]).unwrap();
        assert_eq!(
            find(&report, "database-url").value,
            "postgres://memd:****@db:5432/memd"
        );
        assert_eq!(mask("api_token", "abc"), "****");
        assert_eq!(mask("token_encoding", "o200k_base"), "o200k_base");
        assert_eq!(mask("listen", "127.0.0.1:7070"), "127.0.0.1:7070");
    }
}

/// The embedders a command runs: the default one, any others to load, and
/// where the model files are. Shared by `memd serve`, `memd embedder` and
/// the benchmarks.
#[derive(clap::Args, Clone, Debug)]
pub struct SemanticArgs {
    /// Embedder of tenants that chose none: minilm, minilm_int8, mpnet,
    /// hashed, or none (lexical retrieval only).
    #[arg(long, env = "MEMD_EMBEDDER", default_value = "minilm")]
    pub embedder: String,
    /// Embedders loaded beside the default for tenants that choose them
    /// (comma-separated): mpnet, the quality tier, is loaded only when named
    /// here or as the default (550 MB in memory).
    #[arg(
        long = "also-embedders",
        env = "MEMD_ALSO_EMBEDDERS",
        value_delimiter = ','
    )]
    pub also: Vec<String>,
    /// Folder with the all-MiniLM-L6-v2 files (ops/fetch-model.sh fills it).
    #[arg(long, env = "MEMD_MODEL_DIR", default_value = memd_embedder::ModelDirs::DEFAULT_MINILM)]
    pub model_dir: PathBuf,
    /// Folder with the all-mpnet-base-v2 files (ops/fetch-model.sh mpnet).
    #[arg(long, env = "MEMD_MPNET_DIR", default_value = memd_embedder::ModelDirs::DEFAULT_MPNET)]
    pub mpnet_dir: PathBuf,
}

impl SemanticArgs {
    pub fn config(&self) -> anyhow::Result<crate::read::semantic::SemanticConfig> {
        let known = |flag: &str, name: &str| {
            crate::admin::embedder::known(name)
                .map(str::to_owned)
                .map_err(|e| anyhow::anyhow!("--{flag}: {}", e.message))
        };
        let embedder = match self.embedder.as_str() {
            "none" | "off" => None,
            name => Some(known("embedder", name)?),
        };
        let also = self
            .also
            .iter()
            .map(|name| known("also-embedders", name))
            .collect::<anyhow::Result<_>>()?;
        Ok(crate::read::semantic::SemanticConfig {
            embedder,
            models: memd_embedder::ModelDirs {
                minilm: self.model_dir.clone(),
                mpnet: self.mpnet_dir.clone(),
            },
            also,
        })
    }
}
