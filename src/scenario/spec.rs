//! The scenario file format: what a `scenarios/*.yaml` file may say. See
//! `scenarios/README.md` for the language with examples; every field here
//! is documented there.
//!
//! Steps talk to memd as agents do (events, bundles, handoffs over HTTP),
//! or act on the daemon (restart, rebuild, wait for projections). Names
//! given to events (`id:`) can be used later: in `refs`, `decision_ids` and
//! assertions as bare names, and anywhere in a string as `${name}` (the
//! event id) or `${name.field}` (a field of the answer that recorded it).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// One scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short id, e.g. `A3` or `P1`.
    pub id: String,
    pub name: String,
    /// The design principles (P1–P8) it checks.
    pub principles: Vec<String>,
    #[serde(default)]
    pub description: String,
    pub steps: Vec<Step>,
    pub assertions: Vec<Assertion>,
}

/// A step, written as a one-key map: `- append: {...}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Record one event.
    Append(AppendStep),
    /// Record a tool call and its result (two events).
    Tool(ToolStep),
    /// Record a generated history of many events, in batches.
    Generate(GenerateStep),
    /// Replace the tenant's bundle policy (`PUT /api/v1/policy`).
    Policy(Value),
    /// Record a handoff packet (`POST /api/v1/handoffs`).
    Handoff(HandoffStep),
    /// Build a bundle (`POST /api/v1/acb/build`), keep it under a name.
    Acb(AcbStep),
    /// Stop the daemon and start a new one (cold caches, new pool).
    Restart(RestartStep),
    /// Rebuild the tenant's projections from the log (admin job).
    Rebuild(RebuildStep),
    /// Erase a data subject (`POST /api/v1/admin/erase`) and wait for the
    /// rebuild it queues.
    Erase(EraseStep),
    /// Wait until every projection has applied the log up to its head.
    WaitProjected(Empty),
}

impl Step {
    pub fn verb(&self) -> &'static str {
        match self {
            Step::Append(_) => "append",
            Step::Tool(_) => "tool",
            Step::Generate(_) => "generate",
            Step::Policy(_) => "policy",
            Step::Handoff(_) => "handoff",
            Step::Acb(_) => "acb",
            Step::Restart(_) => "restart",
            Step::Rebuild(_) => "rebuild",
            Step::Erase(_) => "erase",
            Step::WaitProjected(_) => "wait_projected",
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppendStep {
    /// A name for this event, for later steps and assertions.
    pub id: Option<String>,
    /// The actor, `type:id`: `human:alice`, `agent:coder`, `tool:fs`.
    #[serde(rename = "as")]
    pub actor: String,
    pub session: String,
    /// Default `private`.
    pub channel: Option<String>,
    /// Default `message`.
    pub kind: Option<String>,
    /// Shortcut for `content: {text: ...}`.
    pub text: Option<String>,
    pub content: Option<Value>,
    #[serde(default)]
    pub refs: Vec<String>,
    pub sensitivity: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// How long before the run it happened: `14d`, `3h`, `20m`, `45s`.
    pub ago: Option<String>,
    /// The data subject it is about (its `subject_id`).
    pub subject: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolStep {
    /// Names the result event; the call is `<id>_call`.
    pub id: Option<String>,
    /// The agent calling the tool.
    #[serde(rename = "as")]
    pub actor: String,
    pub session: String,
    pub channel: Option<String>,
    pub tool: String,
    #[serde(default)]
    pub args: Value,
    /// The file the output comes from (the result's `content.path`).
    pub path: Option<String>,
    /// The output, inline ...
    pub output: Option<String>,
    /// ... or from a file, relative to the scenario file.
    pub output_file: Option<String>,
    pub ago: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateStep {
    /// `chat` or `tool-heavy` (the histories `memd-bench` loads).
    pub history: String,
    pub events: u64,
    /// Put every event in this session (default: the history's own,
    /// a new session every few hundred events).
    pub session: Option<String>,
    /// Spread the events' times evenly from `from_ago` to `to_ago`
    /// (default: all at commit time).
    pub from_ago: Option<String>,
    pub to_ago: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HandoffStep {
    pub id: Option<String>,
    /// The `POST /api/v1/handoffs` body.
    #[serde(flatten)]
    pub body: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AcbStep {
    /// The bundle's name, for assertions.
    pub id: String,
    /// Build it this many times (timings; `acb_repeatable` compares them).
    #[serde(default = "one")]
    pub repeat: usize,
    /// The `POST /api/v1/acb/build` body.
    #[serde(flatten)]
    pub request: BTreeMap<String, Value>,
}

fn one() -> usize {
    1
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartStep {
    /// Run projection workers in the new daemon (default true). Without
    /// them projections fall behind the log, as when they are slow or down.
    #[serde(default = "yes")]
    pub projectors: bool,
    /// Let the new daemon warm up before it serves, as `memd serve` does
    /// (default true); false restarts it cold: no connections, plans,
    /// cached state or vector indexes until requests ask for them.
    #[serde(default = "yes")]
    pub warm_up: bool,
}

fn yes() -> bool {
    true
}

/// A restart as `memd serve` starts: projecting, warmed up.
impl Default for RestartStep {
    fn default() -> Self {
        Self {
            projectors: true,
            warm_up: true,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RebuildStep {
    /// Only these projectors (default all).
    #[serde(default)]
    pub projectors: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EraseStep {
    /// The data subject to erase.
    pub subject: String,
    /// Who erases it, for the record.
    pub by: Option<String>,
}

/// An assertion, `- type: <kind>` with its fields.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Assertion {
    /// The log holds between `count_min` (default 1) and `count_max`
    /// events matching every given filter.
    EventExists {
        kind: Option<String>,
        session: Option<String>,
        /// `type:id`.
        actor: Option<String>,
        /// Text anywhere in the stored content (case-insensitive).
        text: Option<String>,
        #[serde(default = "one")]
        count_min: usize,
        count_max: Option<usize>,
    },
    /// The named tool result's whole output is in an artifact that answers
    /// with the bytes the event's hash covers, larger than the excerpt.
    ArtifactExists { event: String },
    /// The bundle is within `max` tokens and within its budget.
    AcbMaxTokens { acb: String, max: usize },
    /// A section's tokens are at most `max`.
    SectionTokensMax {
        acb: String,
        section: String,
        max: usize,
    },
    /// Some item of the bundle (of `section`, default any) has `text` in
    /// its text (case-insensitive) and is or cites `ref` (an event name or
    /// id, or a chunk id).
    AcbSectionContains {
        acb: String,
        section: Option<String>,
        text: Option<String>,
        #[serde(rename = "ref")]
        reference: Option<String>,
    },
    /// No item of the bundle (of `section`, default any) matches.
    AcbSectionNotContains {
        acb: String,
        section: Option<String>,
        text: Option<String>,
        #[serde(rename = "ref")]
        reference: Option<String>,
    },
    /// A section holds at most `max` items.
    SectionItemsMax {
        acb: String,
        section: String,
        max: usize,
    },
    /// The ledger has the decision with this status (and successor, refs).
    DecisionStatus {
        decision: String,
        status: String,
        superseded_by: Option<String>,
        /// Names or ids its refs must include.
        #[serde(default)]
        refs: Vec<String>,
    },
    /// Every ref of every item of the bundle resolves through the API
    /// (events, chunks, decisions, artifacts) to this tenant's memory.
    Traceability { acb: String },
    /// The bundle lists an omission with this reason (and candidate,
    /// section).
    Omission {
        acb: String,
        reason: String,
        /// An event name or id, chunk id, or view (`view:preferences`)
        /// among its candidates. A name matches the event's chunks too.
        candidate: Option<String>,
        section: Option<String>,
    },
    /// None of `secrets` is anywhere in the database (every table of every
    /// schema, as text and hex-encoded) nor in any bundle or event the run
    /// read back.
    NoSecretAnywhere { secrets: Vec<String> },
    /// `provenance.candidate_pool_size` is at most `max`.
    CandidatePoolMax { acb: String, max: usize },
    /// `provenance.retrieved` and the evidence section hold at most `max`.
    RetrievedMax { acb: String, max: usize },
    /// At most `max` items of the bundle state the fact (`fact` is a
    /// case-insensitive regular expression).
    ChunksForFactMax {
        acb: String,
        fact: String,
        max: usize,
    },
    /// `provenance.path` is `fast` or `retrieval`.
    AcbPath { acb: String, path: String },
    /// A field of the bundle (JSON pointer) equals a value or lies within
    /// bounds.
    AcbField {
        acb: String,
        pointer: String,
        equals: Option<Value>,
        min: Option<f64>,
        max: Option<f64>,
    },
    /// The bundle has at most `max_growth` more tokens than `baseline`.
    AcbTokensStable {
        acb: String,
        baseline: String,
        max_growth: usize,
    },
    /// Every repeat of the bundle's build gave the same bundle (P7).
    AcbRepeatable { acb: String },
    /// The 95th percentile (nearest rank) of the bundle's build round trips
    /// is at most `p95_ms`: the PRD's time limits (§10), as limits a run
    /// fails only far past, not as benchmarks.
    AcbLatencyMax { acb: String, p95_ms: f64 },
    /// A drift check (admin job) finds the projections equal to a rebuild.
    NoDrift {},
    /// The tenant's hash chain verifies (`memd verify`).
    LogVerified {},
}

impl Assertion {
    pub fn kind(&self) -> &'static str {
        match self {
            Assertion::EventExists { .. } => "event_exists",
            Assertion::ArtifactExists { .. } => "artifact_exists",
            Assertion::AcbMaxTokens { .. } => "acb_max_tokens",
            Assertion::SectionTokensMax { .. } => "section_tokens_max",
            Assertion::AcbSectionContains { .. } => "acb_section_contains",
            Assertion::AcbSectionNotContains { .. } => "acb_section_not_contains",
            Assertion::SectionItemsMax { .. } => "section_items_max",
            Assertion::DecisionStatus { .. } => "decision_status",
            Assertion::Traceability { .. } => "traceability",
            Assertion::Omission { .. } => "omission",
            Assertion::NoSecretAnywhere { .. } => "no_secret_anywhere",
            Assertion::CandidatePoolMax { .. } => "candidate_pool_max",
            Assertion::RetrievedMax { .. } => "retrieved_max",
            Assertion::ChunksForFactMax { .. } => "chunks_for_fact_max",
            Assertion::AcbPath { .. } => "acb_path",
            Assertion::AcbLatencyMax { .. } => "acb_latency_max",
            Assertion::AcbField { .. } => "acb_field",
            Assertion::AcbTokensStable { .. } => "acb_tokens_stable",
            Assertion::AcbRepeatable { .. } => "acb_repeatable",
            Assertion::NoDrift {} => "no_drift",
            Assertion::LogVerified {} => "log_verified",
        }
    }

    /// The bundles it reads.
    pub fn bundles(&self) -> Vec<&str> {
        match self {
            Assertion::AcbMaxTokens { acb, .. }
            | Assertion::SectionTokensMax { acb, .. }
            | Assertion::SectionItemsMax { acb, .. }
            | Assertion::Traceability { acb }
            | Assertion::Omission { acb, .. }
            | Assertion::CandidatePoolMax { acb, .. }
            | Assertion::RetrievedMax { acb, .. }
            | Assertion::ChunksForFactMax { acb, .. }
            | Assertion::AcbPath { acb, .. }
            | Assertion::AcbField { acb, .. }
            | Assertion::AcbRepeatable { acb }
            | Assertion::AcbLatencyMax { acb, .. }
            | Assertion::AcbSectionContains { acb, .. }
            | Assertion::AcbSectionNotContains { acb, .. } => vec![acb],
            Assertion::AcbTokensStable { acb, baseline, .. } => vec![acb, baseline],
            _ => Vec::new(),
        }
    }
}

/// Parses a scenario file's text; errors carry line and column.
pub fn parse(text: &str) -> Result<Scenario, String> {
    serde_saphyr::from_str(text).map_err(|err| err.to_string())
}

/// `14d`, `3h`, `20m`, `45s` as a duration.
pub fn parse_ago(text: &str) -> Result<chrono::Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?}: give a unit (d, h, m, s)"))?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number
        .parse()
        .map_err(|_| format!("{text:?}: not a number of days, hours, minutes or seconds"))?;
    let duration = match unit {
        "d" => chrono::Duration::try_days(number),
        "h" => chrono::Duration::try_hours(number),
        "m" => chrono::Duration::try_minutes(number),
        "s" => chrono::Duration::try_seconds(number),
        _ => return Err(format!("{text:?}: the unit is d, h, m or s")),
    };
    duration.ok_or_else(|| format!("{text:?}: too long ago"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_reads_with_steps_as_verbs_and_assertions_by_type() {
        let scenario = parse(
            r#"
id: A0
name: tiny
principles: [P1]
steps:
  - append: {id: m1, as: "human:alice", session: s1, text: "hello"}
  - wait_projected: {}
  - acb: {id: q, session_id: s1, query_text: "hello?", max_tokens: 2000}
  - restart: {}
assertions:
  - type: acb_section_contains
    acb: q
    section: recent_window
    ref: m1
  - {type: acb_max_tokens, acb: q, max: 2000}
  - {type: no_drift}
"#,
        )
        .unwrap();
        assert_eq!(scenario.steps.len(), 4);
        let Step::Acb(acb) = &scenario.steps[2] else {
            panic!("an acb step")
        };
        assert_eq!(acb.repeat, 1);
        assert_eq!(acb.request["max_tokens"], 2000);
        let Step::Restart(restart) = &scenario.steps[3] else {
            panic!("a restart step")
        };
        assert!(restart.projectors);
        assert!(restart.warm_up, "a restart warms up unless told not to");
        let Assertion::AcbSectionContains { reference, .. } = &scenario.assertions[0] else {
            panic!("acb_section_contains")
        };
        assert_eq!(reference.as_deref(), Some("m1"));
        assert_eq!(scenario.assertions[2].kind(), "no_drift");
    }

    #[test]
    fn mistakes_are_reported_with_their_line() {
        let err =
            parse("id: A0\nname: x\nprinciples: []\nsteps:\n  - teleport: {}\nassertions: []\n")
                .unwrap_err();
        assert!(err.contains("line 5"), "{err}");
        assert!(err.contains("teleport"), "{err}");
        let err = parse(
            "id: A0\nname: x\nprinciples: []\nsteps: []\nassertions:\n  - {type: acb_max_tokens, acb: q}\n",
        )
        .unwrap_err();
        assert!(err.contains("max"), "{err}");
        let err = parse(
            "id: A0\nname: x\nprinciples: []\nsteps: []\nassertions:\n  - {type: acb_max_tokens, acb: q, max: 1, maks: 2}\n",
        )
        .unwrap_err();
        assert!(err.contains("maks"), "a misspelt field is an error: {err}");
    }

    #[test]
    fn ago_takes_days_hours_minutes_seconds() {
        assert_eq!(parse_ago("14d").unwrap(), chrono::Duration::days(14));
        assert_eq!(parse_ago("90m").unwrap(), chrono::Duration::minutes(90));
        assert!(parse_ago("14").is_err());
        assert!(parse_ago("3w").is_err());
        assert!(parse_ago("99999999999999d").is_err());
    }
}
