//! A configuration file, as an operator uses one: `memd serve --config`
//! runs with its values, `memd config check` shows each value's source, and
//! the environment beats the file.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{free_port, memd_cli, spawn_daemon, wait_until};

#[sqlx::test]
async fn memd_serve_runs_with_its_config_file_and_the_environment_wins(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // The test's database, migrated by a daemon of the test, then left to
    // the process the file configures.
    let app = spawn_daemon(connect).await;
    let database_url = app.database_url().await;
    let (api, metrics) = (free_port(), free_port());
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("memd-config-{}.yaml", ulid::Ulid::generate()));
    std::fs::write(
        &file,
        format!(
            "# as an operator writes it\n\
             database-url: {database_url}\n\
             listen: 127.0.0.1:{api}\n\
             metrics_listen: 127.0.0.1:{metrics}\n\
             embedder: hashed\n\
             db-connections: 4\n"
        ),
    )
    .unwrap();
    let mut serve = tokio::process::Command::new(env!("CARGO_BIN_EXE_memd"))
        .args(["serve", "--config", file.to_str().unwrap()])
        .env_remove("DATABASE_URL")
        .env_remove("MEMD_LISTEN")
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .expect("memd serve");
    let client = reqwest::Client::new();
    wait_until(
        Duration::from_secs(60),
        "memd serve ready on the file's port",
        async || match client
            .get(format!("http://127.0.0.1:{api}/readyz"))
            .send()
            .await
        {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(response.status().to_string()),
            Err(err) => Err(err.to_string()),
        },
    )
    .await;
    let scraped = client
        .get(format!("http://127.0.0.1:{metrics}/metrics"))
        .send()
        .await
        .unwrap();
    let status = scraped.status();
    let text = scraped.text().await.unwrap();
    assert!(status.is_success(), "{status}: {text}");
    assert!(
        text.contains("memd_db_pool_max_connections 4"),
        "the file's pool size: {text}"
    );
    serve.start_kill().unwrap();
    serve.wait().await.unwrap();

    // What `config check` says: the file's values and the environment's.
    let mut check = tokio::process::Command::new(env!("CARGO_BIN_EXE_memd"));
    check
        .args(["config", "check", "--config", file.to_str().unwrap()])
        .env_remove("DATABASE_URL")
        .env("MEMD_LISTEN", "127.0.0.1:9999")
        .env_remove("MEMD_KEY_FILE");
    let output = check.output().await.unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}");
    let line = |name: &str| {
        printed
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {printed}"))
            .to_owned()
    };
    assert!(line("listen").contains("127.0.0.1:9999    (env MEMD_LISTEN)"));
    assert!(line("embedder").contains("hashed    (file "));
    assert!(line("db-connections").contains("= 4 "));

    // A typo is an error naming the key, before anything runs.
    std::fs::write(&file, "listne: 127.0.0.1:1\n").unwrap();
    let (code, _, err) = memd_cli(
        &database_url,
        &["config", "check", "--config", file.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("`listne` is not an option"), "{err}");
    let _ = std::fs::remove_file(file);
}

/// The service file in `ops/systemd/` is one systemd accepts, hardened
/// (`systemd-analyze security` rates its exposure at most 1.5), and
/// its configuration file is one memd accepts.
#[tokio::test]
async fn the_systemd_unit_verifies_and_its_config_file_checks() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let unit = std::fs::read_to_string(root.join("ops/systemd/memd.service")).unwrap();
    let installed = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("memd-{}.service", ulid::Ulid::generate()));
    std::fs::write(
        &installed,
        unit.replace("/usr/local/bin/memd", env!("CARGO_BIN_EXE_memd")),
    )
    .unwrap();
    for args in [
        vec!["verify"],
        // Exposure in tenths: 15 is systemd's "1.5 OK".
        vec!["security", "--offline=true", "--threshold=15"],
    ] {
        let output = tokio::process::Command::new("systemd-analyze")
            .args(&args)
            .arg(&installed)
            .output()
            .await
            .expect("systemd-analyze (Debian's systemd package)");
        assert!(
            output.status.success(),
            "systemd-analyze {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let _ = std::fs::remove_file(installed);

    let sample = root.join("ops/systemd/memd.yaml");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_memd"))
        .args(["config", "check", "--config", sample.to_str().unwrap()])
        .env_remove("DATABASE_URL")
        .env_remove("MEMD_LISTEN")
        // The sample names /etc/memd/memd.key; this machine has the test's.
        .env("MEMD_KEY_FILE", crate::helpers::test_key_file())
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(printed.contains("metrics-listen"), "{printed}");
    assert!(printed.contains("127.0.0.1:7071"), "{printed}");
}

/// `memd config check` names each embedder `memd serve` would run without,
/// and the first model file its folder lacks (a folder holding the weights
/// but not the tokenizer would serve lexical bundles only).
#[tokio::test]
async fn config_check_names_the_model_files_an_embedder_lacks() {
    let scratch = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("memd-models-{}", ulid::Ulid::generate()));
    let minilm = scratch.join("minilm");
    let mpnet = scratch.join("mpnet");
    std::fs::create_dir_all(&minilm).unwrap();
    std::fs::write(minilm.join("model.safetensors"), b"").unwrap();
    let file = scratch.join("memd.yaml");
    // What `config check` prints with `yaml` as the file, and no
    // embedder setting in the environment.
    let check = async |yaml: String| {
        std::fs::write(&file, yaml).unwrap();
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_memd"))
            .args(["config", "check", "--config", file.to_str().unwrap()])
            .env_remove("DATABASE_URL")
            .env_remove("MEMD_EMBEDDER")
            .env_remove("MEMD_ALSO_EMBEDDERS")
            .env_remove("MEMD_MODEL_DIR")
            .env_remove("MEMD_MPNET_DIR")
            .env_remove("MEMD_KEY_FILE")
            .output()
            .await
            .unwrap();
        let printed = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "notes are not errors: {printed}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        printed
    };

    let printed = check(format!(
        "embedder: minilm\nmodel-dir: {}\nalso-embedders: mpnet\nmpnet-dir: {}\n",
        minilm.display(),
        mpnet.display()
    ))
    .await;
    let note = |name: &str, missing: &std::path::Path| {
        printed.lines().any(|l| {
            l.starts_with(&format!(
                "# note: embedder {name}: no {}:",
                missing.display()
            ))
        })
    };
    assert!(note("minilm", &minilm.join("tokenizer.json")), "{printed}");
    assert!(note("mpnet", &mpnet.join("model.safetensors")), "{printed}");

    // With every file there, no note.
    for name in ["tokenizer.json", "config.json"] {
        std::fs::write(minilm.join(name), b"").unwrap();
    }
    let printed = check(format!(
        "embedder: minilm\nmodel-dir: {}\n",
        minilm.display()
    ))
    .await;
    assert!(!printed.contains("# note: embedder"), "{printed}");
    let _ = std::fs::remove_dir_all(scratch);
}
