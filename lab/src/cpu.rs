//! CPU time used so far by this process and by the PostgreSQL server's
//! processes on this machine, read from `/proc` (Linux): what lets a bench
//! say where a wall-clock second went. A process that exits between two
//! readings takes its time with it, so a reading spans work done on
//! connections that stay open.

use std::time::Duration;

/// `/proc/<pid>/stat` counts in USER_HZ, which Linux fixes at 100 for
/// user space whatever the kernel's own tick.
const TICKS_PER_SECOND: u64 = 100;

#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTimes {
    /// This process (every thread, living or not).
    pub memd: Duration,
    /// Every process named `postgres` (backends, WAL writer, checkpointer...);
    /// `None` when there is none here (a server on another machine).
    pub postgres: Option<Duration>,
}

impl CpuTimes {
    /// The counters now; `None` without `/proc`.
    pub fn now() -> Option<Self> {
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        let (_, memd) = parse_stat(&own)?;
        let mut postgres = None;
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            if !entry
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
            {
                continue;
            }
            // A process may exit between the listing and the read.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            if let Some(("postgres", ticks)) = parse_stat(&stat) {
                *postgres.get_or_insert(0) += ticks;
            }
        }
        Some(Self {
            memd: ticks(memd),
            postgres: postgres.map(ticks),
        })
    }

    /// What was used between `earlier` and `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            memd: self.memd.saturating_sub(earlier.memd),
            postgres: self
                .postgres
                .zip(earlier.postgres)
                .map(|(now, then)| now.saturating_sub(then)),
        }
    }
}

fn ticks(count: u64) -> Duration {
    Duration::from_millis(count * 1000 / TICKS_PER_SECOND)
}

/// A `/proc/<pid>/stat` line's command name and user + system ticks
/// (fields 14 and 15; the name, in parentheses, may hold spaces).
fn parse_stat(stat: &str) -> Option<(&str, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = &stat[open + 1..close];
    let mut fields = stat[close + 1..].split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some((name, user + system))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_name_and_cpu_ticks() {
        let line =
            "4242 (post gres) S 1 4242 4242 0 -1 4194560 1009 0 0 0 250 75 0 0 20 0 1 0 97 225 1 0";
        assert_eq!(parse_stat(line), Some(("post gres", 325)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_has_used_some_cpu() {
        // Spin until the kernel has counted a tick of this process's CPU
        // (10 ms at 100 Hz), not for a fixed wall time: on a loaded machine
        // 30 ms of wall time can pass without one. Five seconds of spinning
        // without any is a failure.
        let spin = std::time::Instant::now();
        let times = loop {
            let times = CpuTimes::now().expect("/proc on Linux");
            if times.memd > Duration::ZERO || spin.elapsed() > Duration::from_secs(5) {
                break times;
            }
        };
        assert!(times.memd > Duration::ZERO);
    }
}
