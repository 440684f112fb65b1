//! Mixed load for the drills: clients alternating an append (one event,
//! with an idempotency key) and a bundle, recording what every request got.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::{client, event};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Op {
    Append,
    Bundle,
}

/// What a request got.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Outcome {
    Ok,
    /// An HTTP error status, and whether it carried `Retry-After`.
    Status {
        code: u16,
        retry_after: bool,
    },
    /// No answer within the client's timeout.
    Hung,
    /// The connection failed (the daemon is not listening).
    Refused,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    pub op: Op,
    /// When the request was sent, from the start of the load.
    pub sent: Duration,
    pub took: Duration,
    pub outcome: Outcome,
}

impl Sample {
    pub fn answered_at(&self) -> Duration {
        self.sent + self.took
    }
}

#[derive(Default)]
struct Record {
    samples: Vec<Sample>,
    /// Idempotency keys of acknowledged events.
    acknowledged: Vec<String>,
    /// Append bodies that got no success, to retry once the drill is over.
    failed_appends: Vec<Value>,
}

/// Clients running until [`Load::finish`].
pub(super) struct Load {
    pub started: Instant,
    record: Arc<Mutex<Record>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

/// What the load saw, once stopped.
pub(super) struct Finished {
    pub samples: Vec<Sample>,
    pub acknowledged: Vec<String>,
    pub failed_appends: Vec<Value>,
}

/// A client that got an error waits this long before its next request; it
/// retries sooner than `Retry-After` asks, to time the recovery closely.
const PAUSE_AFTER_FAILURE: Duration = Duration::from_millis(100);

impl Load {
    /// Starts `clients` clients, spread over the daemons at `base_urls`;
    /// keys are prefixed by `label` so that loads of several rounds never
    /// collide.
    pub fn start(base_urls: &[&str], token: &str, clients: usize, label: &str) -> Self {
        let record = Arc::new(Mutex::new(Record::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let http = client();
        let tasks = (0..clients)
            .map(|c| {
                let (record, stop, http) = (record.clone(), stop.clone(), http.clone());
                let (base_url, token, label) = (
                    base_urls[c % base_urls.len()].to_owned(),
                    token.to_owned(),
                    label.to_owned(),
                );
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let op = if n.is_multiple_of(2) { Op::Append } else { Op::Bundle };
                        let (url, body) = match op {
                            Op::Append => {
                                let key = format!("{label}-c{c}-{n}");
                                let text = format!("client {c} notes item {n} of {label}");
                                (format!("{base_url}/api/v1/events"), event(key, text))
                            }
                            Op::Bundle => (
                                format!("{base_url}/api/v1/acb/build"),
                                json!({"session_id": "drill", "agent_id": "drill", "intent": "question",
                                       "query_text": format!("what did client {c} note about item {}", n / 2),
                                       "max_tokens": 2000}),
                            ),
                        };
                        let sent = started.elapsed();
                        let response = http.post(&url).bearer_auth(&token).json(&body).send().await;
                        let outcome = match &response {
                            Ok(r) if r.status().is_success() => Outcome::Ok,
                            Ok(r) => Outcome::Status {
                                code: r.status().as_u16(),
                                retry_after: r.headers().contains_key("retry-after"),
                            },
                            Err(e) if e.is_timeout() => Outcome::Hung,
                            Err(_) => Outcome::Refused,
                        };
                        // Read the whole answer: a body cut off counts as failed.
                        let outcome = match (outcome, response) {
                            (Outcome::Ok, Ok(r)) => match r.bytes().await {
                                Ok(_) => Outcome::Ok,
                                Err(e) if e.is_timeout() => Outcome::Hung,
                                Err(_) => Outcome::Refused,
                            },
                            (outcome, _) => outcome,
                        };
                        let took = started.elapsed() - sent;
                        {
                            let mut record = record.lock().expect("record");
                            record.samples.push(Sample {
                                op,
                                sent,
                                took,
                                outcome,
                            });
                            if op == Op::Append {
                                if outcome == Outcome::Ok {
                                    let key = body["idempotency_key"].as_str().expect("a key");
                                    record.acknowledged.push(key.to_owned());
                                } else {
                                    record.failed_appends.push(body);
                                }
                            }
                        }
                        if outcome != Outcome::Ok {
                            tokio::time::sleep(PAUSE_AFTER_FAILURE).await;
                        }
                        n += 1;
                    }
                })
            })
            .collect();
        Self {
            started,
            record,
            stop,
            tasks,
        }
    }

    /// The samples so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.record.lock().expect("record").samples.clone()
    }

    /// Waits (at most `bound`) until an append and a bundle sent at or
    /// after `after` (on the load's clock) have succeeded; when each of
    /// those first successes was answered, on the load's clock (`None`: not
    /// within `bound`).
    pub async fn first_successes_after(
        &self,
        after: Duration,
        bound: Duration,
    ) -> (Option<Duration>, Option<Duration>) {
        let deadline = Instant::now() + bound;
        loop {
            let samples = self.samples();
            let first = |op: Op| {
                samples
                    .iter()
                    .filter(|s| s.op == op && s.outcome == Outcome::Ok && s.sent >= after)
                    .map(Sample::answered_at)
                    .min()
            };
            let found = (first(Op::Append), first(Op::Bundle));
            if (found.0.is_some() && found.1.is_some()) || Instant::now() > deadline {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn finish(self) -> Finished {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
        let record = std::mem::take(&mut *self.record.lock().expect("record"));
        Finished {
            samples: record.samples,
            acknowledged: record.acknowledged,
            failed_appends: record.failed_appends,
        }
    }
}

/// Counts of what the requests got.
#[derive(Default, Debug)]
pub(super) struct Tally {
    pub requests: usize,
    pub ok: usize,
    pub unavailable_with_retry_after: usize,
    pub unavailable_without_retry_after: usize,
    pub server_errors: usize,
    pub other_statuses: usize,
    pub hung: usize,
    pub refused: usize,
    /// The slowest answer that was not a success.
    pub slowest_failure: Duration,
}

impl Tally {
    pub fn of(samples: &[Sample]) -> Self {
        let mut tally = Self::default();
        for sample in samples {
            tally.requests += 1;
            match sample.outcome {
                Outcome::Ok => tally.ok += 1,
                Outcome::Status {
                    code: 503,
                    retry_after,
                } => {
                    if retry_after {
                        tally.unavailable_with_retry_after += 1;
                    } else {
                        tally.unavailable_without_retry_after += 1;
                    }
                }
                Outcome::Status { code, .. } if code >= 500 => tally.server_errors += 1,
                Outcome::Status { .. } => tally.other_statuses += 1,
                Outcome::Hung => tally.hung += 1,
                Outcome::Refused => tally.refused += 1,
            }
            if sample.outcome != Outcome::Ok {
                tally.slowest_failure = tally.slowest_failure.max(sample.took);
            }
        }
        tally
    }

    /// Answers other than success or 503 with `Retry-After`: what a client
    /// must never get.
    pub fn bad(&self) -> usize {
        self.unavailable_without_retry_after
            + self.server_errors
            + self.other_statuses
            + self.hung
            + self.refused
    }
}
