//! Checking assertions. Each check is a pure function of [`Facts`]: what
//! the run recorded (bundles, names) and what the runner read back for the
//! assertions that need it (the log, the ledger, resolved refs, a database
//! scan, a drift check). So every kind can be shown to fail when it should
//! without a daemon (the tests below), and the runner's I/O stays in one
//! place.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::spec::Assertion;

/// A bundle the run built: every repeat's answer, first first.
#[derive(Debug, Clone, Default)]
pub struct BuiltAcb {
    pub answers: Vec<Value>,
    /// Client-side round trip of each build, in ms.
    pub round_trips_ms: Vec<f64>,
}

impl BuiltAcb {
    pub fn first(&self) -> &Value {
        self.answers.first().unwrap_or(&Value::Null)
    }
}

/// An artifact as fetched, checked against its event.
#[derive(Debug, Clone)]
pub struct ArtifactCheck {
    pub status: u16,
    pub bytes: usize,
    /// SHA-256 of the fetched bytes equals the event's `artifact_sha256`.
    pub hash_matches: bool,
    /// The excerpt kept in the event, in bytes.
    pub excerpt_bytes: usize,
}

/// Everything assertions are checked against.
#[derive(Debug, Default)]
pub struct Facts {
    /// Names given in steps, to the answer that recorded them.
    pub names: HashMap<String, Value>,
    pub acbs: HashMap<String, BuiltAcb>,
    /// The tenant's whole log, read back (when an assertion needs it).
    pub events: Vec<Value>,
    /// The tenant's whole decision ledger.
    pub decisions: Vec<Value>,
    /// Each ref cited by a checked bundle: whether it resolved to this
    /// tenant's memory through the API.
    pub resolved: HashMap<String, bool>,
    /// Per secret: the places it was found (`schema.table`, `bundle q1`, ...).
    pub secret_hits: HashMap<String, Vec<String>>,
    pub artifacts: HashMap<String, ArtifactCheck>,
    /// The drift check job's result.
    pub drift: Option<Value>,
    /// `memd verify` of the tenant: `Ok(events)` or the broken link.
    pub verified: Option<Result<u64, String>>,
}

impl Facts {
    /// The event id a name stands for, or the text itself when it is not a
    /// name (a literal id).
    pub fn id(&self, name: &str) -> String {
        self.names
            .get(name)
            .and_then(|answer| {
                answer
                    .get("event_id")
                    .or_else(|| answer.get("handoff_id"))
                    .and_then(Value::as_str)
            })
            .unwrap_or(name)
            .to_owned()
    }

    fn acb(&self, name: &str) -> Result<&BuiltAcb, Outcome> {
        self.acbs
            .get(name)
            .ok_or_else(|| Outcome::fail(format!("a bundle named {name}"), "no such bundle"))
    }
}

/// How an assertion came out.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub passed: bool,
    pub expected: String,
    pub actual: String,
}

impl Outcome {
    fn pass(expected: impl Into<String>, actual: impl Into<String>) -> Self {
        Self {
            passed: true,
            expected: expected.into(),
            actual: actual.into(),
        }
    }

    fn fail(expected: impl Into<String>, actual: impl Into<String>) -> Self {
        Self {
            passed: false,
            expected: expected.into(),
            actual: actual.into(),
        }
    }

    fn when(passed: bool, expected: impl Into<String>, actual: impl Into<String>) -> Self {
        Self {
            passed,
            expected: expected.into(),
            actual: actual.into(),
        }
    }
}

/// Items of a bundle, with their section's name.
fn items<'a>(acb: &'a Value, section: Option<&str>) -> Vec<(&'a str, &'a Value)> {
    acb["sections"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| section.is_none_or(|name| s["name"] == name))
        .flat_map(|s| {
            let name = s["name"].as_str().unwrap_or("");
            s["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |item| (name, item))
        })
        .collect()
}

/// Whether an item is or cites `id` (an event id, chunk id, view ref).
/// A chunk id `chk_<event ulid>_<n>` counts as its event's.
fn item_cites(item: &Value, id: &str) -> bool {
    let event_of_chunk = |chunk: &str| {
        chunk
            .strip_prefix("chk_")
            .and_then(|rest| rest.rsplit_once('_'))
            .map(|(ulid, _)| format!("evt_{ulid}"))
    };
    let mut cited: Vec<String> = item["refs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    for field in [
        "chunk_id",
        "event_id",
        "decision_id",
        "handoff_id",
        "task_id",
    ] {
        if let Some(value) = item[field].as_str() {
            cited.push(value.to_owned());
        }
    }
    cited
        .iter()
        .any(|c| c == id || event_of_chunk(c).as_deref() == Some(id))
}

fn describe_items(found: &[(&str, &Value)]) -> String {
    if found.is_empty() {
        return "no items".into();
    }
    found
        .iter()
        .take(8)
        .map(|(section, item)| {
            let text: String = item["text"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(70)
                .collect();
            format!(
                "{section}/{}: {:?}",
                item["handle"].as_str().unwrap_or("?"),
                text.trim()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
        + if found.len() > 8 { "; ..." } else { "" }
}

fn matching<'a>(
    facts: &Facts,
    acb: &'a Value,
    section: Option<&str>,
    text: Option<&str>,
    reference: Option<&str>,
) -> Vec<(&'a str, &'a Value)> {
    let id = reference.map(|r| facts.id(r));
    let needle = text.map(str::to_lowercase);
    items(acb, section)
        .into_iter()
        .filter(|(_, item)| {
            needle.as_ref().is_none_or(|n| {
                item["text"]
                    .as_str()
                    .is_some_and(|t| t.to_lowercase().contains(n))
            })
        })
        .filter(|(_, item)| id.as_ref().is_none_or(|id| item_cites(item, id)))
        .collect()
}

fn describe_match(section: Option<&str>, text: Option<&str>, reference: Option<&str>) -> String {
    let mut parts = vec![format!("an item in {}", section.unwrap_or("any section"))];
    if let Some(text) = text {
        parts.push(format!("with text {text:?}"));
    }
    if let Some(reference) = reference {
        parts.push(format!("citing {reference}"));
    }
    parts.join(" ")
}

fn number(value: &Value) -> Option<f64> {
    value.as_f64()
}

/// Checks one assertion against the facts.
pub fn check(assertion: &Assertion, facts: &Facts) -> Outcome {
    match run(assertion, facts) {
        Ok(outcome) | Err(outcome) => outcome,
    }
}

// Long on purpose: one arm per kind of assertion a scenario file may
// state, each a few lines; the match is the list of what can be asserted.
fn run(assertion: &Assertion, facts: &Facts) -> Result<Outcome, Outcome> {
    Ok(match assertion {
        Assertion::EventExists {
            kind,
            session,
            actor,
            text,
            count_min,
            count_max,
        } => {
            let needle = text.as_ref().map(|t| t.to_lowercase());
            let count = facts
                .events
                .iter()
                .filter(|e| kind.as_ref().is_none_or(|k| e["kind"] == k.as_str()))
                .filter(|e| {
                    session
                        .as_ref()
                        .is_none_or(|s| e["session_id"] == s.as_str())
                })
                .filter(|e| {
                    actor.as_ref().is_none_or(|a| {
                        format!(
                            "{}:{}",
                            e["actor_type"].as_str().unwrap_or(""),
                            e["actor_id"].as_str().unwrap_or("")
                        ) == *a
                    })
                })
                .filter(|e| {
                    needle
                        .as_ref()
                        .is_none_or(|n| e["content"].to_string().to_lowercase().contains(n))
                })
                .count();
            let within = count >= *count_min && count_max.is_none_or(|max| count <= max);
            let bounds = match count_max {
                Some(max) => format!("{count_min}..={max}"),
                None => format!("at least {count_min}"),
            };
            Outcome::when(
                within,
                format!("{bounds} matching events"),
                format!("{count} of {} events match", facts.events.len()),
            )
        }
        Assertion::ArtifactExists { event } => {
            let Some(check) = facts.artifacts.get(event) else {
                return Err(Outcome::fail(
                    format!("{event} recorded a tool output kept in an artifact"),
                    "no artifact_id on the event",
                ));
            };
            Outcome::when(
                check.status == 200 && check.hash_matches && check.bytes > check.excerpt_bytes,
                "the artifact answers 200 with bytes whose SHA-256 the event records, more than its excerpt",
                format!(
                    "status {}, {} bytes (excerpt {}), hash {}",
                    check.status,
                    check.bytes,
                    check.excerpt_bytes,
                    if check.hash_matches {
                        "matches"
                    } else {
                        "differs"
                    }
                ),
            )
        }
        Assertion::AcbMaxTokens { acb, max } => {
            let built = facts.acb(acb)?;
            let worst = built
                .answers
                .iter()
                .map(|a| {
                    (
                        a["token_used_est"].as_u64().unwrap_or(u64::MAX),
                        a["budget_tokens"].as_u64().unwrap_or(0),
                    )
                })
                .max()
                .unwrap_or((u64::MAX, 0));
            Outcome::when(
                worst.0 <= *max as u64 && worst.0 <= worst.1,
                format!("token_used_est <= {max} and <= budget_tokens"),
                format!("{} tokens, budget {}", worst.0, worst.1),
            )
        }
        Assertion::SectionTokensMax { acb, section, max } => {
            let built = facts.acb(acb)?;
            let tokens = built.first()["sections"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["name"] == section.as_str())
                .and_then(|s| s["token_est"].as_u64())
                .unwrap_or(0);
            Outcome::when(
                tokens <= *max as u64,
                format!("{section} within {max} tokens"),
                format!("{tokens} tokens"),
            )
        }
        Assertion::AcbSectionContains {
            acb,
            section,
            text,
            reference,
        } => {
            let built = facts.acb(acb)?;
            let (section, text, reference) =
                (section.as_deref(), text.as_deref(), reference.as_deref());
            let found = matching(facts, built.first(), section, text, reference);
            Outcome::when(
                !found.is_empty(),
                describe_match(section, text, reference),
                if found.is_empty() {
                    format!(
                        "none; the section holds {}",
                        describe_items(&items(built.first(), section))
                    )
                } else {
                    describe_items(&found)
                },
            )
        }
        Assertion::AcbSectionNotContains {
            acb,
            section,
            text,
            reference,
        } => {
            let built = facts.acb(acb)?;
            let (section, text, reference) =
                (section.as_deref(), text.as_deref(), reference.as_deref());
            let found = matching(facts, built.first(), section, text, reference);
            Outcome::when(
                found.is_empty(),
                format!("no {}", describe_match(section, text, reference)),
                if found.is_empty() {
                    "none".to_owned()
                } else {
                    describe_items(&found)
                },
            )
        }
        Assertion::SectionItemsMax { acb, section, max } => {
            let built = facts.acb(acb)?;
            let count = items(built.first(), Some(section)).len();
            Outcome::when(
                count <= *max,
                format!("at most {max} items in {section}"),
                format!("{count} items"),
            )
        }
        Assertion::DecisionStatus {
            decision,
            status,
            superseded_by,
            refs,
        } => {
            let id = facts.id(decision);
            let Some(row) = facts.decisions.iter().find(|d| d["decision_id"] == id) else {
                return Err(Outcome::fail(
                    format!("{decision} ({id}) in the ledger"),
                    format!("not among {} decisions", facts.decisions.len()),
                ));
            };
            let successor = superseded_by.as_ref().map(|s| facts.id(s));
            let cited: Vec<String> = refs.iter().map(|r| facts.id(r)).collect();
            let row_refs: Vec<&str> = row["refs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let passed = row["status"] == status.as_str()
                && successor
                    .as_ref()
                    .is_none_or(|s| row["superseded_by"] == s.as_str())
                && cited.iter().all(|c| row_refs.contains(&c.as_str()));
            let mut expected = format!("status {status}");
            if let Some(s) = &successor {
                expected.push_str(&format!(", superseded_by {s}"));
            }
            if !cited.is_empty() {
                expected.push_str(&format!(", refs include {cited:?}"));
            }
            Outcome::when(
                passed,
                expected,
                format!(
                    "status {}, superseded_by {}, refs {row_refs:?}{}",
                    row["status"],
                    row["superseded_by"],
                    row["rejected_reason"]
                        .as_str()
                        .map(|r| format!(", rejected: {r}"))
                        .unwrap_or_default()
                ),
            )
        }
        Assertion::Traceability { acb } => {
            let built = facts.acb(acb)?;
            let mut total = 0;
            let mut broken = Vec::new();
            let mut bare = Vec::new();
            for (section, item) in items(built.first(), None) {
                let refs: Vec<&str> = item["refs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                if refs.is_empty() {
                    bare.push(format!("{section}/{}", item["handle"]));
                }
                for r in refs {
                    total += 1;
                    if facts.resolved.get(r) != Some(&true) {
                        broken.push(r.to_owned());
                    }
                }
            }
            Outcome::when(
                total > 0 && broken.is_empty() && bare.is_empty(),
                "every item cites refs, and every ref resolves in this tenant",
                format!(
                    "{total} refs, {} unresolved {:?}, items without refs {:?}",
                    broken.len(),
                    broken.iter().take(5).collect::<Vec<_>>(),
                    bare
                ),
            )
        }
        Assertion::Omission {
            acb,
            reason,
            candidate,
            section,
        } => {
            let built = facts.acb(acb)?;
            let id = candidate.as_ref().map(|c| facts.id(c));
            let omissions = built.first()["omissions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let found = omissions.iter().any(|o| {
                o["reason"] == reason.as_str()
                    && section.as_ref().is_none_or(|s| o["section"] == s.as_str())
                    && id.as_ref().is_none_or(|id| {
                        o["candidates"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| item_cites(&json!({"refs": [c]}), id))
                    })
            });
            let listed: Vec<String> = omissions
                .iter()
                .map(|o| {
                    format!(
                        "{}{} x{}",
                        o["reason"].as_str().unwrap_or("?"),
                        o["section"]
                            .as_str()
                            .map(|s| format!(" in {s}"))
                            .unwrap_or_default(),
                        o["count"]
                    )
                })
                .collect();
            Outcome::when(
                found,
                format!(
                    "an omission for {reason}{}{}",
                    section
                        .as_ref()
                        .map(|s| format!(" in {s}"))
                        .unwrap_or_default(),
                    candidate
                        .as_ref()
                        .map(|c| format!(" naming {c}"))
                        .unwrap_or_default()
                ),
                if listed.is_empty() {
                    "no omissions".to_owned()
                } else {
                    listed.join(", ")
                },
            )
        }
        Assertion::NoSecretAnywhere { secrets } => {
            let found: BTreeMap<&str, &Vec<String>> = secrets
                .iter()
                .filter_map(|s| {
                    facts
                        .secret_hits
                        .get(s)
                        .filter(|places| !places.is_empty())
                        .map(|places| (s.as_str(), places))
                })
                .collect();
            let unchecked: Vec<&str> = secrets
                .iter()
                .filter(|s| !facts.secret_hits.contains_key(*s))
                .map(String::as_str)
                .collect();
            Outcome::when(
                found.is_empty() && unchecked.is_empty() && !secrets.is_empty(),
                format!(
                    "none of {} secrets in the database, the log or any bundle",
                    secrets.len()
                ),
                if !unchecked.is_empty() {
                    format!("not scanned for {unchecked:?}")
                } else if found.is_empty() {
                    "found nowhere".to_owned()
                } else {
                    format!("found {found:?}")
                },
            )
        }
        Assertion::CandidatePoolMax { acb, max } => {
            let built = facts.acb(acb)?;
            let pool = built
                .answers
                .iter()
                .filter_map(|a| a["provenance"]["candidate_pool_size"].as_u64())
                .max();
            Outcome::when(
                pool.is_some_and(|p| p <= *max as u64),
                format!("candidate_pool_size <= {max}"),
                format!("{pool:?}"),
            )
        }
        Assertion::RetrievedMax { acb, max } => {
            let built = facts.acb(acb)?;
            let retrieved = built.first()["provenance"]["retrieved"].as_u64();
            let evidence = items(built.first(), Some("retrieved_evidence")).len();
            Outcome::when(
                retrieved.is_some_and(|r| r <= *max as u64) && evidence <= *max,
                format!("at most {max} retrieved"),
                format!("provenance.retrieved {retrieved:?}, {evidence} evidence items"),
            )
        }
        Assertion::ChunksForFactMax { acb, fact, max } => {
            let built = facts.acb(acb)?;
            let pattern = regex::RegexBuilder::new(fact)
                .case_insensitive(true)
                .build()
                .map_err(|err| Outcome::fail("a valid fact pattern", err.to_string()))?;
            let stating: Vec<(&str, &Value)> = items(built.first(), None)
                .into_iter()
                .filter(|(_, item)| item["text"].as_str().is_some_and(|t| pattern.is_match(t)))
                .collect();
            Outcome::when(
                stating.len() <= *max && !stating.is_empty(),
                format!("1..={max} items stating /{fact}/"),
                format!("{}: {}", stating.len(), describe_items(&stating)),
            )
        }
        Assertion::AcbLatencyMax { acb, p95_ms } => {
            let built = facts.acb(acb)?;
            let mut times = built.round_trips_ms.clone();
            times.sort_by(f64::total_cmp);
            let rank = ((times.len() as f64) * 0.95).ceil().max(1.0) as usize;
            let p95 = times.get(rank - 1).copied().unwrap_or(f64::INFINITY);
            Outcome::when(
                p95 <= *p95_ms,
                format!("p95 of {} builds ≤ {p95_ms} ms", times.len()),
                format!("p95 {p95:.1} ms"),
            )
        }
        Assertion::AcbPath { acb, path } => {
            let built = facts.acb(acb)?;
            let actual = &built.first()["provenance"]["path"];
            Outcome::when(
                actual == path.as_str(),
                format!("path {path}"),
                format!("path {actual}"),
            )
        }
        Assertion::AcbField {
            acb,
            pointer,
            equals,
            min,
            max,
        } => {
            let built = facts.acb(acb)?;
            let value = built.first().pointer(pointer).unwrap_or(&Value::Null);
            let passed = equals
                .as_ref()
                .is_none_or(|e| e == value || (number(e).is_some() && number(e) == number(value)))
                && min.is_none_or(|m| number(value).is_some_and(|v| v >= m))
                && max.is_none_or(|m| number(value).is_some_and(|v| v <= m));
            let mut expected = Vec::new();
            if let Some(e) = equals {
                expected.push(format!("= {e}"));
            }
            if let Some(m) = min {
                expected.push(format!(">= {m}"));
            }
            if let Some(m) = max {
                expected.push(format!("<= {m}"));
            }
            Outcome::when(
                passed && !expected.is_empty(),
                format!("{pointer} {}", expected.join(" and ")),
                format!("{pointer} = {value}"),
            )
        }
        Assertion::AcbTokensStable {
            acb,
            baseline,
            max_growth,
        } => {
            let tokens = |name: &str| -> Result<u64, Outcome> {
                Ok(facts.acb(name)?.first()["token_used_est"]
                    .as_u64()
                    .unwrap_or(u64::MAX))
            };
            let (now, before) = (tokens(acb)?, tokens(baseline)?);
            Outcome::when(
                now <= before.saturating_add(*max_growth as u64),
                format!("{acb} at most {max_growth} tokens above {baseline} ({before})"),
                format!("{now} tokens"),
            )
        }
        Assertion::AcbRepeatable { acb } => {
            let built = facts.acb(acb)?;
            // What legitimately differs between two builds of one bundle:
            // ids, timings, and what was read from memory rather than from
            // PostgreSQL (the tenant's state, the recent window, the
            // semantic side's work: `diagnostics`).
            let stable = |answer: &Value| {
                let mut answer = answer.clone();
                if let Some(fields) = answer.as_object_mut() {
                    fields.remove("acb_id");
                }
                if let Some(provenance) = answer["provenance"].as_object_mut() {
                    for volatile in [
                        "elapsed_ms",
                        "stages_ms",
                        "cache",
                        "recent_window",
                        "consistency",
                        "diagnostics",
                    ] {
                        provenance.remove(volatile);
                    }
                }
                answer
            };
            let first = stable(built.first());
            let differing = built
                .answers
                .iter()
                .skip(1)
                .filter(|a| stable(a) != first)
                .count();
            Outcome::when(
                built.answers.len() > 1 && differing == 0,
                "every repeat the same bundle (ids and timings aside)",
                format!(
                    "{} builds, {differing} differ from the first",
                    built.answers.len()
                ),
            )
        }
        Assertion::NoDrift {} => match &facts.drift {
            Some(result) => Outcome::when(
                result["drifted"] == false,
                "no drift between the projections and a rebuild",
                match result["drifted"].as_bool() {
                    Some(false) => "no drift".to_owned(),
                    _ => result["text"].as_str().unwrap_or("drift").to_owned(),
                },
            ),
            None => Outcome::fail("a drift check result", "no drift check ran"),
        },
        Assertion::LogVerified {} => match &facts.verified {
            Some(Ok(events)) => Outcome::pass(
                "the hash chain verifies",
                format!("{events} events verified"),
            ),
            Some(Err(broken)) => Outcome::fail("the hash chain verifies", broken.clone()),
            None => Outcome::fail("the hash chain verifies", "not verified"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::spec::parse;

    /// The assertions of a scenario text (steps left empty).
    fn assertions(yaml: &str) -> Vec<Assertion> {
        parse(&format!(
            "id: T\nname: t\nprinciples: []\nsteps: []\nassertions:\n{yaml}"
        ))
        .unwrap()
        .assertions
    }

    fn one(yaml: &str) -> Assertion {
        assertions(yaml).remove(0)
    }

    fn bundle() -> Value {
        json!({
            "token_used_est": 900, "budget_tokens": 1000,
            "sections": [
                {"name": "decision_ledger", "token_est": 40, "items": [
                    {"type": "decision", "handle": "D1", "text": "Store secrets encrypted (v2)",
                     "refs": ["evt_D2", "evt_M2"], "decision_id": "evt_D2"}]},
                {"name": "retrieved_evidence", "token_est": 300, "items": [
                    {"type": "evidence", "handle": "E1", "text": "Our budget is 65K tokens",
                     "refs": ["chk_M1_0", "evt_M1"], "chunk_id": "chk_M1_0", "event_id": "evt_M1"},
                    {"type": "evidence", "handle": "E2", "text": "budget: 65,000 tokens",
                     "refs": ["chk_M3_0", "evt_M3"], "chunk_id": "chk_M3_0", "event_id": "evt_M3"}]},
            ],
            "omissions": [
                {"reason": "superseded", "section": "retrieved_evidence", "candidates": ["chk_D1_0"], "count": 1},
                {"reason": "privacy", "section": "rules", "candidates": ["view:preferences"], "count": 1}],
            "provenance": {"path": "retrieval", "candidate_pool_size": 40, "retrieved": 2,
                           "cache": "miss", "elapsed_ms": 3.0, "lag_events": 0},
        })
    }

    fn facts() -> Facts {
        let mut facts = Facts::default();
        for (name, id) in [
            ("d1", "evt_D1"),
            ("d2", "evt_D2"),
            ("m1", "evt_M1"),
            ("m2", "evt_M2"),
        ] {
            facts
                .names
                .insert(name.into(), json!({"event_id": id, "seq": 1}));
        }
        facts.acbs.insert(
            "q".into(),
            BuiltAcb {
                answers: vec![bundle()],
                round_trips_ms: vec![5.0],
            },
        );
        facts
    }

    /// Passes on `facts`, fails once `spoil` has changed them.
    fn passes_then_fails(yaml: &str, mut facts: Facts, spoil: impl FnOnce(&mut Facts)) {
        let assertion = one(yaml);
        let outcome = check(&assertion, &facts);
        assert!(outcome.passed, "{yaml} should pass: {outcome:?}");
        spoil(&mut facts);
        let outcome = check(&assertion, &facts);
        assert!(!outcome.passed, "{yaml} should fail: {outcome:?}");
        assert!(!outcome.actual.is_empty());
    }

    fn bundle_mut(facts: &mut Facts) -> &mut Value {
        &mut facts.acbs.get_mut("q").unwrap().answers[0]
    }

    #[test]
    fn event_exists_counts_matching_events() {
        let mut facts = facts();
        facts.events = vec![
            json!({"kind": "tool_result", "session_id": "s1", "actor_type": "tool", "actor_id": "fs",
                   "content": {"excerpt_text": "# ledgerlite"}}),
            json!({"kind": "message", "session_id": "s1", "actor_type": "human", "actor_id": "alice",
                   "content": {"text": "what is this project for?"}}),
        ];
        passes_then_fails(
            "  - {type: event_exists, kind: tool_result, actor: 'tool:fs', text: LEDGERLITE}",
            facts,
            |f| {
                f.events.remove(0);
            },
        );
        let mut facts = self::facts();
        facts.events = vec![json!({"kind": "message"}); 3];
        passes_then_fails(
            "  - {type: event_exists, kind: message, count_min: 2, count_max: 3}",
            facts,
            |f| f.events.push(json!({"kind": "message"})),
        );
    }

    #[test]
    fn artifact_exists_needs_matching_bytes_beyond_the_excerpt() {
        let mut facts = facts();
        facts.artifacts.insert(
            "deps".into(),
            ArtifactCheck {
                status: 200,
                bytes: 90_000,
                hash_matches: true,
                excerpt_bytes: 65_000,
            },
        );
        passes_then_fails("  - {type: artifact_exists, event: deps}", facts, |f| {
            f.artifacts.get_mut("deps").unwrap().hash_matches = false
        });
        passes_then_fails(
            "  - {type: artifact_exists, event: deps}",
            {
                let mut f = self::facts();
                f.artifacts.insert(
                    "deps".into(),
                    ArtifactCheck {
                        status: 200,
                        bytes: 9,
                        hash_matches: true,
                        excerpt_bytes: 1,
                    },
                );
                f
            },
            |f| f.artifacts.clear(),
        );
    }

    #[test]
    fn acb_max_tokens_holds_the_bundle_to_the_bound_and_its_budget() {
        passes_then_fails(
            "  - {type: acb_max_tokens, acb: q, max: 1000}",
            facts(),
            |f| bundle_mut(f)["token_used_est"] = json!(1001),
        );
        passes_then_fails(
            "  - {type: acb_max_tokens, acb: q, max: 5000}",
            facts(),
            |f| bundle_mut(f)["budget_tokens"] = json!(800),
        );
    }

    #[test]
    fn section_tokens_max_and_section_items_max() {
        passes_then_fails(
            "  - {type: section_tokens_max, acb: q, section: retrieved_evidence, max: 300}",
            facts(),
            |f| bundle_mut(f)["sections"][1]["token_est"] = json!(301),
        );
        passes_then_fails(
            "  - {type: section_items_max, acb: q, section: retrieved_evidence, max: 2}",
            facts(),
            |f| {
                let extra = bundle_mut(f)["sections"][1]["items"][0].clone();
                bundle_mut(f)["sections"][1]["items"]
                    .as_array_mut()
                    .unwrap()
                    .push(extra)
            },
        );
    }

    #[test]
    fn section_contains_matches_text_and_refs_by_name() {
        passes_then_fails(
            "  - {type: acb_section_contains, acb: q, section: decision_ledger, text: ENCRYPTED, ref: d2}",
            facts(),
            |f| {
                let item = &mut bundle_mut(f)["sections"][0]["items"][0];
                item["decision_id"] = json!("evt_D9");
                item["refs"] = json!(["evt_D9", "evt_M2"]);
            },
        );
        // A chunk id cites its event.
        passes_then_fails(
            "  - {type: acb_section_contains, acb: q, section: retrieved_evidence, ref: m1}",
            facts(),
            |f| {
                bundle_mut(f)["sections"][1]["items"]
                    .as_array_mut()
                    .unwrap()
                    .remove(0);
            },
        );
        // Unknown bundle: a failure, not a panic.
        let outcome = check(
            &one("  - {type: acb_section_contains, acb: nope, text: x}"),
            &facts(),
        );
        assert!(!outcome.passed);
    }

    #[test]
    fn section_not_contains_fails_when_an_item_matches() {
        passes_then_fails(
            "  - {type: acb_section_not_contains, acb: q, section: decision_ledger, ref: d1}",
            facts(),
            |f| bundle_mut(f)["sections"][0]["items"][0]["refs"] = json!(["evt_D1"]),
        );
        passes_then_fails(
            "  - {type: acb_section_not_contains, acb: q, text: 32K}",
            facts(),
            |f| bundle_mut(f)["sections"][1]["items"][0]["text"] = json!("budget is 32K"),
        );
    }

    #[test]
    fn decision_status_checks_status_successor_and_refs() {
        let mut facts = facts();
        facts.decisions = vec![
            json!({"decision_id": "evt_D1", "status": "superseded", "superseded_by": "evt_D2", "refs": ["evt_M1"]}),
            json!({"decision_id": "evt_D2", "status": "active", "superseded_by": null, "refs": ["evt_M2"]}),
        ];
        passes_then_fails(
            "  - {type: decision_status, decision: d1, status: superseded, superseded_by: d2, refs: [m1]}",
            facts,
            |f| f.decisions[0]["superseded_by"] = json!("evt_D7"),
        );
        let mut facts = self::facts();
        facts.decisions =
            vec![json!({"decision_id": "evt_D2", "status": "active", "refs": ["evt_M2"]})];
        passes_then_fails(
            "  - {type: decision_status, decision: d2, status: active, refs: [m2]}",
            facts,
            |f| f.decisions[0]["refs"] = json!([]),
        );
    }

    #[test]
    fn traceability_needs_every_ref_resolved_and_every_item_to_cite() {
        let mut facts = facts();
        for r in [
            "evt_D2", "evt_M2", "chk_M1_0", "evt_M1", "chk_M3_0", "evt_M3",
        ] {
            facts.resolved.insert(r.into(), true);
        }
        passes_then_fails("  - {type: traceability, acb: q}", facts, |f| {
            f.resolved.insert("chk_M3_0".into(), false);
        });
        let mut facts = self::facts();
        for r in [
            "evt_D2", "evt_M2", "chk_M1_0", "evt_M1", "chk_M3_0", "evt_M3",
        ] {
            facts.resolved.insert(r.into(), true);
        }
        passes_then_fails("  - {type: traceability, acb: q}", facts, |f| {
            bundle_mut(f)["sections"][0]["items"][0]["refs"] = json!([])
        });
    }

    #[test]
    fn omission_matches_reason_section_and_candidate() {
        passes_then_fails(
            "  - {type: omission, acb: q, reason: superseded, candidate: d1}",
            facts(),
            |f| bundle_mut(f)["omissions"][0]["candidates"] = json!(["chk_D9_0"]),
        );
        passes_then_fails(
            "  - {type: omission, acb: q, reason: privacy, section: rules, candidate: 'view:preferences'}",
            facts(),
            |f| bundle_mut(f)["omissions"][1]["section"] = json!("identity"),
        );
    }

    #[test]
    fn no_secret_anywhere_fails_on_any_hit_or_an_unscanned_secret() {
        let mut facts = facts();
        facts.secret_hits.insert("sk-abc".into(), vec![]);
        passes_then_fails(
            "  - {type: no_secret_anywhere, secrets: [sk-abc]}",
            facts,
            |f| {
                f.secret_hits
                    .insert("sk-abc".into(), vec!["public.events".into()]);
            },
        );
        let mut facts = self::facts();
        facts.secret_hits.insert("sk-abc".into(), vec![]);
        passes_then_fails(
            "  - {type: no_secret_anywhere, secrets: [sk-abc]}",
            facts,
            |f| {
                f.secret_hits.clear();
            },
        );
    }

    #[test]
    fn candidate_pool_and_retrieved_bounds() {
        passes_then_fails(
            "  - {type: candidate_pool_max, acb: q, max: 40}",
            facts(),
            |f| bundle_mut(f)["provenance"]["candidate_pool_size"] = json!(2001),
        );
        passes_then_fails("  - {type: retrieved_max, acb: q, max: 2}", facts(), |f| {
            bundle_mut(f)["provenance"]["retrieved"] = json!(3)
        });
    }

    #[test]
    fn chunks_for_fact_max_counts_items_stating_the_fact() {
        passes_then_fails(
            "  - {type: chunks_for_fact_max, acb: q, fact: '65\\s*(k|,000)', max: 2}",
            facts(),
            |f| bundle_mut(f)["sections"][0]["items"][0]["text"] = json!("65k again"),
        );
    }

    #[test]
    fn latency_is_checked_at_the_95th_percentile() {
        let mut facts = facts();
        facts.acbs.get_mut("q").unwrap().round_trips_ms = (1..=20).map(f64::from).collect();
        // 20 builds: the 19th fastest is the p95; the slowest is allowed over.
        passes_then_fails(
            "  - {type: acb_latency_max, acb: q, p95_ms: 19}",
            facts,
            |f| f.acbs.get_mut("q").unwrap().round_trips_ms[18] = 150.0,
        );
    }

    #[test]
    fn path_field_and_token_stability() {
        passes_then_fails(
            "  - {type: acb_path, acb: q, path: retrieval}",
            facts(),
            |f| bundle_mut(f)["provenance"]["path"] = json!("fast"),
        );
        passes_then_fails(
            "  - {type: acb_field, acb: q, pointer: /provenance/cache, equals: miss}",
            facts(),
            |f| bundle_mut(f)["provenance"]["cache"] = json!("hit"),
        );
        passes_then_fails(
            "  - {type: acb_field, acb: q, pointer: /provenance/lag_events, max: 0}",
            facts(),
            |f| bundle_mut(f)["provenance"]["lag_events"] = json!(3),
        );
        let mut facts = facts();
        let mut later = bundle();
        later["token_used_est"] = json!(950);
        facts.acbs.insert(
            "later".into(),
            BuiltAcb {
                answers: vec![later],
                round_trips_ms: vec![],
            },
        );
        passes_then_fails(
            "  - {type: acb_tokens_stable, acb: later, baseline: q, max_growth: 50}",
            facts,
            |f| f.acbs.get_mut("later").unwrap().answers[0]["token_used_est"] = json!(951),
        );
    }

    #[test]
    fn repeatable_bundles_ignore_ids_and_timings_only() {
        let mut facts = facts();
        let mut again = bundle();
        again["acb_id"] = json!("acb_other");
        again["provenance"]["elapsed_ms"] = json!(9.5);
        again["provenance"]["stages_ms"]["rank"] = json!(0.7);
        again["provenance"]["recent_window"] = json!({"events": 3, "read": 0});
        facts.acbs.get_mut("q").unwrap().answers.push(again);
        passes_then_fails("  - {type: acb_repeatable, acb: q}", facts, |f| {
            f.acbs.get_mut("q").unwrap().answers[1]["sections"][1]["items"][0]["handle"] =
                json!("E2")
        });
    }

    #[test]
    fn drift_and_chain_need_a_clean_result() {
        let mut facts = facts();
        facts.drift = Some(json!({"drifted": false}));
        passes_then_fails("  - {type: no_drift}", facts, |f| {
            f.drift = Some(json!({"drifted": true, "text": "chunks differ"}))
        });
        let mut facts = self::facts();
        facts.verified = Some(Ok(12));
        passes_then_fails("  - {type: log_verified}", facts, |f| {
            f.verified = Some(Err("seq 3: hash mismatch".into()))
        });
    }
}
