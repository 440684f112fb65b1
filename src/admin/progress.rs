//! Progress of a replay on stderr: a redrawn line on a terminal, a line
//! every few seconds otherwise (logs stay readable).

use std::{
    io::{IsTerminal, Write},
    time::{Duration, Instant},
};

use memd_projectors::rebuild::Progress;

pub struct ProgressPrinter {
    terminal: bool,
    started: Instant,
    last_drawn: Option<Instant>,
    label: &'static str,
}

impl ProgressPrinter {
    pub fn new(label: &'static str) -> Self {
        Self {
            terminal: std::io::stderr().is_terminal(),
            started: Instant::now(),
            last_drawn: None,
            label,
        }
    }

    pub fn update(&mut self, progress: Progress<'_>) {
        let every = if self.terminal {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(5)
        };
        let finished = progress.done >= progress.total;
        if !finished && self.last_drawn.is_some_and(|at| at.elapsed() < every) {
            return;
        }
        self.last_drawn = Some(Instant::now());
        let line = render(self.label, progress, self.started.elapsed());
        let mut stderr = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(stderr, "\r\x1b[2K{line}");
            if finished {
                let _ = writeln!(stderr);
            }
        } else {
            let _ = writeln!(stderr, "{line}");
        }
    }
}

fn render(label: &str, progress: Progress<'_>, elapsed: Duration) -> String {
    const WIDTH: usize = 30;
    let fraction = if progress.total > 0 {
        (progress.done as f64 / progress.total as f64).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let filled = (fraction * WIDTH as f64).round() as usize;
    let rate = progress.done as f64 / elapsed.as_secs_f64().max(1e-3);
    format!(
        "{label} {tenant} [{bar}{space}] {done}/{total} events, {rate:.0} events/s",
        tenant = progress.tenant,
        bar = "#".repeat(filled),
        space = " ".repeat(WIDTH - filled),
        done = progress.done,
        total = progress.total,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_bar_and_rate() {
        let line = render(
            "rebuild",
            Progress {
                tenant: "acme",
                done: 50,
                total: 100,
            },
            Duration::from_secs(2),
        );
        assert_eq!(
            line,
            format!(
                "rebuild acme [{}{}] 50/100 events, 25 events/s",
                "#".repeat(15),
                " ".repeat(15)
            )
        );
    }
}
