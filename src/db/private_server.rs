//! PostgreSQL servers of memd's own: a fresh cluster in a temporary folder
//! on a free port of 127.0.0.1, and a streaming-replication standby of it,
//! each removed when dropped. The drills stop and start them under load;
//! the standby tests make one lag or disappear. The machine's shared
//! server is never touched.

use std::{os::unix::fs::MetadataExt, path::PathBuf};

use anyhow::Context;

/// A cluster in a folder of its own, stopped and removed when dropped.
pub struct PrivateServer {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
}

impl PrivateServer {
    /// `initdb` and start a new primary (trust auth for `postgres`, local
    /// replication connections allowed, as `initdb` sets them up).
    pub async fn create() -> anyhow::Result<Self> {
        let server = Self::empty("pg").await?;
        run_program(
            server
                .command("initdb")
                .args(["--auth=trust", "--username=postgres", "--no-sync", "-D"])
                .arg(server.data()),
        )
        .await?;
        server.start().await?;
        Ok(server)
    }

    /// A hot standby of `primary`: `pg_basebackup -R` (a base backup that
    /// streams the WAL written meanwhile, and a `standby.signal` with the
    /// primary's connection), started on a port of its own, streaming from
    /// then on.
    pub async fn standby_of(primary: &PrivateServer) -> anyhow::Result<Self> {
        let server = Self::empty("standby").await?;
        run_program(
            server
                .command("pg_basebackup")
                .args(["-h", "127.0.0.1", "-U", "postgres", "-p"])
                .arg(primary.port.to_string())
                .args(["-R", "-X", "stream", "--no-sync", "-D"])
                .arg(server.data()),
        )
        .await?;
        server.start().await?;
        Ok(server)
    }

    async fn empty(kind: &str) -> anyhow::Result<Self> {
        let bin = server_binaries()?;
        let dir = std::env::temp_dir().join(format!("memd-{kind}-{}", ulid::Ulid::generate()));
        std::fs::create_dir_all(&dir)?;
        let port = free_port()?;
        let server = Self { dir, bin, port };
        if running_as_root() {
            // PostgreSQL refuses to run as root.
            run_program(
                tokio::process::Command::new("chown")
                    .arg("postgres:")
                    .arg(&server.dir),
            )
            .await?;
        }
        Ok(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// `pg_ctl start`, waiting until it accepts connections.
    pub async fn start(&self) -> anyhow::Result<()> {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {}",
            self.port,
            self.dir.display()
        );
        run_program(
            self.command("pg_ctl")
                .args(["start", "-w", "-t", "60", "-D"])
                .arg(self.data())
                .arg("-l")
                .arg(self.dir.join("server.log"))
                .args(["-o", &options]),
        )
        .await
    }

    /// `pg_ctl stop -m fast`: ends every session, then shuts down cleanly.
    pub async fn stop(&self) -> anyhow::Result<()> {
        run_program(
            self.command("pg_ctl")
                .args(["stop", "-w", "-m", "fast", "-D"])
                .arg(self.data()),
        )
        .await
    }

    /// A server program, as the `postgres` user when running as root.
    fn command(&self, program: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::from(self.blocking_command(program));
        command.kill_on_drop(true);
        command
    }

    /// [`Self::command`] for `Drop`, which cannot await.
    fn blocking_command(&self, program: &str) -> std::process::Command {
        let path = self.bin.join(program);
        if running_as_root() {
            let mut command = std::process::Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            std::process::Command::new(path)
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self
            .blocking_command("pg_ctl")
            .args(["stop", "-w", "-m", "immediate", "-D"])
            .arg(self.data())
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where `initdb` and `pg_ctl` are: Debian keeps them out of `PATH`, under
/// `/usr/lib/postgresql/<version>/bin` (the newest wins).
fn server_binaries() -> anyhow::Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("pg_ctl").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    if let Some((_, bin)) = found.pop() {
        return Ok(bin);
    }
    let which = std::process::Command::new("sh")
        .args(["-c", "dirname \"$(command -v pg_ctl)\""])
        .output()
        .context("looking for pg_ctl")?;
    let dir = String::from_utf8_lossy(&which.stdout).trim().to_owned();
    anyhow::ensure!(
        which.status.success() && !dir.is_empty() && dir != ".",
        "no PostgreSQL server programs (pg_ctl, initdb) found: install PostgreSQL"
    );
    Ok(PathBuf::from(dir))
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A port of 127.0.0.1 that nothing listens on now.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Runs a helper program to its end; its output is shown only if it fails.
pub async fn run_program(command: &mut tokio::process::Command) -> anyhow::Result<()> {
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {command:?}"))?;
    anyhow::ensure!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}
