//! `decisions` (the ledger) and `summaries` (with conflict flags).
//!
//! One projector owns both tables because a summary is checked against the
//! ledger as it stood at the summary's seq: applying both in one ordered
//! pass keeps that check deterministic on replay.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Value, json};
use sqlx::PgConnection;

use crate::{
    projector::{Fold, Table},
    retraction::{self, Step},
};

use memd_core::{
    content::{self, Content},
    event::{Channel, Kind, Sensitivity, StoredEvent},
    seal::SealError,
};

const TABLES: &[Table] = &[
    Table {
        name: "decisions",
        key: &["tenant_id", "decision_id"],
    },
    Table {
        name: "summaries",
        key: &["tenant_id", "event_id"],
    },
];

pub struct DecisionProjector;

impl Fold for DecisionProjector {
    const NAME: &'static str = "decisions";
    const VERSION: i32 = 1;
    const TABLES: &'static [Table] = TABLES;
    const KINDS: &'static [Kind] = &[Kind::Decision, Kind::Summary, Kind::Retraction];

    async fn fold<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: Vec<&'a StoredEvent>,
    ) -> Result<(), sqlx::Error> {
        for step in retraction::steps(events) {
            match step {
                Step::Fold(events) => fold_decisions(tx, tenant, events).await?,
                Step::Withdraw(retraction) => withdraw(tx, tenant, retraction).await?,
            }
        }
        Ok(())
    }
}

/// A withdrawn decision is no longer in force (`retracted`, naming the
/// retraction). The one it superseded stays superseded: nobody asserted
/// it again, so its key has no decision in force until a new one.
async fn withdraw(
    tx: &mut PgConnection,
    tenant: &str,
    retraction: &StoredEvent,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE decisions SET status = 'retracted', retracted_by = $2
          WHERE tenant_id = $1 AND decision_id = ANY ($3) AND status <> 'retracted'",
        tenant,
        &retraction.event_id,
        &retraction.refs,
    )
    .execute(tx)
    .await?;
    Ok(())
}

async fn fold_decisions<'a>(
    tx: &mut PgConnection,
    tenant: &str,
    events: Vec<&'a StoredEvent>,
) -> Result<(), sqlx::Error> {
    // The batch is folded in memory and each row written once: one
    // transaction (a rebuild) may supersede the same key thousands
    // of times, and updating a row that often leaves a chain of
    // versions every later lookup would have to walk.
    let read: Vec<Read<'a>> = events
        .into_iter()
        .filter_map(|event| match event.shape() {
            Content::Decision(decision) => Some(Read::Decision(event, decision)),
            Content::Summary(summary) => Some(Read::Summary(event, summary)),
            _ => None,
        })
        .collect();
    let mut ledger = Ledger::load(tx, tenant, &read).await?;
    let mut summaries = Vec::new();
    for read in read {
        match read {
            Read::Decision(event, decision) => ledger.decide(event, decision),
            Read::Summary(event, summary) => {
                summaries.push(ledger.check_summary(event, summary));
            }
        }
    }
    ledger.write(tx, tenant).await?;
    insert_summaries(tx, tenant, summaries).await
}

/// An event of the batch, with its content read.
enum Read<'a> {
    Decision(&'a StoredEvent, content::Decision<'a>),
    Summary(&'a StoredEvent, content::Summary<'a>),
}

impl<'a> Read<'a> {
    fn event(&self) -> &'a StoredEvent {
        match self {
            Read::Decision(event, _) | Read::Summary(event, _) => event,
        }
    }
}

/// The decided value of an active decision, as summaries are checked
/// against it.
#[derive(Debug, Clone)]
struct Active {
    decision_id: String,
    decision: String,
    value: Option<Value>,
    refs: Vec<String>,
}

/// A summary as checked against the ledger, ready to be written.
struct CheckedSummary<'a> {
    event: &'a StoredEvent,
    text: Option<&'a str>,
    /// As sent.
    claims: Value,
    conflicts: Vec<Value>,
}

/// A decision this batch creates.
struct NewDecision<'a> {
    event: &'a StoredEvent,
    content: content::Decision<'a>,
    status: &'static str,
    superseded_by: Option<String>,
    rejected_reason: Option<String>,
}

/// The part of the ledger a batch touches, as of the event being applied.
#[derive(Default)]
struct Ledger<'a> {
    /// Where each ref of the batch points: the seq of the event it names.
    ref_seqs: HashMap<String, i64>,
    /// Decisions an event may name in `supersedes`: id → (key, active).
    known: HashMap<String, (Option<String>, bool)>,
    /// The active decision of each key.
    active_by_key: HashMap<String, Active>,
    /// Decisions created by this batch, in order, and where each is.
    created: Vec<NewDecision<'a>>,
    created_at: HashMap<String, usize>,
    /// Earlier decisions this batch supersedes: id → successor.
    superseded: BTreeMap<String, String>,
}

impl<'a> Ledger<'a> {
    async fn load(
        tx: &mut PgConnection,
        tenant: &str,
        read: &[Read<'a>],
    ) -> Result<Self, sqlx::Error> {
        let mut ledger = Ledger::default();
        let refs: BTreeSet<&str> = read
            .iter()
            .flat_map(|r| r.event().refs.iter().map(String::as_str))
            .collect();
        let refs: Vec<&str> = refs.into_iter().collect();
        // A ref is an event id, or a chunk id (`chk_<ulid>_<part>`, from `evt_<ulid>`).
        let rows = sqlx::query!(
            r#"SELECT r AS "r!", e.seq FROM unnest($2::text[]) AS r
                JOIN public.events e
                  ON e.tenant_id = $1
                 AND e.event_id = CASE WHEN r LIKE 'chk\_%'
                                       THEN 'evt_' || split_part(substr(r, 5), '_', 1)
                                       ELSE r END"#,
            tenant,
            &refs as &[&str],
        )
        .fetch_all(&mut *tx)
        .await?;
        ledger.ref_seqs = rows.into_iter().map(|row| (row.r, row.seq)).collect();

        let named: Vec<&str> = read
            .iter()
            .filter_map(|r| match r {
                Read::Decision(_, decision) => decision.supersedes,
                Read::Summary(..) => None,
            })
            .collect();
        let rows = sqlx::query!(
            "SELECT decision_id, key, status FROM decisions
              WHERE tenant_id = $1 AND decision_id = ANY ($2)",
            tenant,
            &named as &[&str],
        )
        .fetch_all(&mut *tx)
        .await?;
        for row in rows {
            ledger
                .known
                .insert(row.decision_id, (row.key, row.status == "active"));
        }

        let mut keys: BTreeSet<&str> = BTreeSet::new();
        for r in read {
            match r {
                Read::Decision(_, decision) => keys.extend(decision.key),
                Read::Summary(_, summary) => keys.extend(summary.claims().map(|(key, _)| key)),
            }
        }
        let keys: Vec<&str> = keys.into_iter().collect();
        let rows = sqlx::query!(
            r#"SELECT decision_id, key AS "key!", decision, value, refs FROM decisions
              WHERE tenant_id = $1 AND key = ANY ($2) AND status = 'active'"#,
            tenant,
            &keys as &[&str],
        )
        .fetch_all(&mut *tx)
        .await?;
        // Sealed decisions are compared with summaries as plaintext.
        let keyring = read
            .first()
            .map(|r| r.event().keyring.clone())
            .unwrap_or_default();
        let unseal =
            |error: SealError| sqlx::Error::Protocol(format!("decision of {tenant}: {error}"));
        for row in rows {
            let (id, key, mut decision, mut value) =
                (row.decision_id, row.key, row.decision, row.value);
            keyring
                .open_in_place(tenant, &mut decision)
                .map_err(unseal)?;
            if let Some(value) = &mut value {
                keyring.open_json(tenant, value).map_err(unseal)?;
            }
            ledger.known.insert(id.clone(), (Some(key.clone()), true));
            ledger.active_by_key.insert(
                key,
                Active {
                    decision_id: id,
                    decision,
                    value,
                    refs: row.refs,
                },
            );
        }
        Ok(ledger)
    }

    /// Refs that name no event of this tenant recorded before `event`.
    fn missing_refs(&self, event: &StoredEvent) -> Vec<String> {
        event
            .refs
            .iter()
            .filter(|r| self.ref_seqs.get(*r).is_none_or(|seq| *seq >= event.seq))
            .cloned()
            .collect()
    }

    /// Why a decision cannot enter the ledger, if it cannot (P4: every
    /// decision cites the evidence it rests on).
    fn rejection(&self, event: &StoredEvent, decision: &content::Decision<'_>) -> Option<String> {
        if event.refs.is_empty() {
            return Some(
                "no refs: a decision must cite the events or chunks it rests on".to_owned(),
            );
        }
        let missing = self.missing_refs(event);
        if !missing.is_empty() {
            return Some(format!(
                "refs not found among this tenant's earlier events: {}",
                missing.join(", ")
            ));
        }
        if let Some(old) = decision.supersedes
            && !self.known.contains_key(old)
        {
            return Some(format!(
                "supersedes {old}, which is not an earlier decision of this tenant"
            ));
        }
        None
    }

    fn decide(&mut self, event: &'a StoredEvent, decision: content::Decision<'a>) {
        let rejected_reason = self.rejection(event, &decision);
        let key = decision.key;
        if rejected_reason.is_none() {
            // The decision named by `supersedes`, and the active one of the
            // same key, give way to this one.
            let mut replaced: Vec<String> = Vec::new();
            if let Some(old) = decision.supersedes
                && self.known.get(old).is_some_and(|(_, active)| *active)
            {
                replaced.push(old.to_owned());
            }
            if let Some(active) = key.and_then(|key| self.active_by_key.get(key)) {
                replaced.push(active.decision_id.clone());
            }
            for old in replaced {
                self.supersede(&old, &event.event_id);
            }
        }
        let status = if rejected_reason.is_some() {
            "rejected"
        } else {
            "active"
        };
        self.known.insert(
            event.event_id.clone(),
            (key.map(str::to_owned), status == "active"),
        );
        if let (Some(key), "active") = (key, status) {
            self.active_by_key.insert(
                key.to_owned(),
                Active {
                    decision_id: event.event_id.clone(),
                    decision: decision.decision.unwrap_or_default().to_owned(),
                    value: decision.value.clone(),
                    refs: event.refs.clone(),
                },
            );
        }
        self.created_at
            .insert(event.event_id.clone(), self.created.len());
        self.created.push(NewDecision {
            event,
            content: decision,
            status,
            superseded_by: None,
            rejected_reason,
        });
    }

    fn supersede(&mut self, old: &str, successor: &str) {
        let Some((key, active)) = self.known.get_mut(old) else {
            return;
        };
        if !*active {
            return;
        }
        *active = false;
        if let Some(key) = key
            && self
                .active_by_key
                .get(key.as_str())
                .is_some_and(|a| a.decision_id == old)
        {
            self.active_by_key.remove(key.as_str());
        }
        match self.created_at.get(old) {
            Some(&index) => {
                let created = &mut self.created[index];
                created.status = "superseded";
                created.superseded_by = Some(successor.to_owned());
            }
            None => {
                self.superseded.insert(old.to_owned(), successor.to_owned());
            }
        }
    }

    /// A summary checked against the ledger as it stands at its seq (A4).
    fn check_summary(
        &self,
        event: &'a StoredEvent,
        summary: content::Summary<'a>,
    ) -> CheckedSummary<'a> {
        let mut conflicts = Vec::new();
        if event.refs.is_empty() {
            conflicts.push(json!({
                "reason": "no_refs",
                "message": "a summary must cite the events it summarizes",
            }));
        } else {
            let missing = self.missing_refs(event);
            if !missing.is_empty() {
                conflicts.push(json!({
                    "reason": "missing_refs",
                    "message": "refs not found among this tenant's earlier events",
                    "refs": missing,
                }));
            }
        }
        for (key, value) in summary.claims() {
            let Some(decided) = self.active_by_key.get(key) else {
                continue;
            };
            if agrees(value, decided.value.as_ref(), &decided.decision) {
                continue;
            }
            conflicts.push(json!({
                "reason": "contradicts_decision",
                "message": format!("claims {key} = {value}, but the active decision says otherwise"),
                "key": key,
                "claim": value,
                "summary_refs": event.refs,
                "decision_id": decided.decision_id,
                "decision": decided.decision,
                "decision_value": decided.value,
                "decision_refs": decided.refs,
            }));
        }
        let claims = summary.claims_as_sent.unwrap_or(json!([]));
        CheckedSummary {
            event,
            text: summary.text,
            claims,
            conflicts,
        }
    }

    async fn write(self, tx: &mut PgConnection, tenant: &str) -> Result<(), sqlx::Error> {
        if !self.superseded.is_empty() {
            let (old, by): (Vec<String>, Vec<String>) = self.superseded.into_iter().unzip();
            sqlx::query!(
                "UPDATE decisions d SET status = 'superseded', superseded_by = u.by
                   FROM unnest($2::text[], $3::text[]) AS u (id, by)
                  WHERE d.tenant_id = $1 AND d.decision_id = u.id",
                tenant,
                &old,
                &by,
            )
            .execute(&mut *tx)
            .await?;
        }
        if self.created.is_empty() {
            return Ok(());
        }
        let mut rows = DecisionRows::default();
        for created in self.created {
            rows.push(created);
        }
        rows.insert(tx, tenant).await
    }
}

/// Column arrays for one multi-row INSERT of decisions. Arrays of arrays
/// must be rectangular in PostgreSQL, so lists travel as JSON.
#[derive(Default)]
struct DecisionRows {
    decision_id: Vec<String>,
    seq: Vec<i64>,
    ts: Vec<chrono::DateTime<chrono::Utc>>,
    session_id: Vec<String>,
    channel: Vec<Channel>,
    sensitivity: Vec<Sensitivity>,
    actor_id: Vec<String>,
    tags: Vec<String>,
    status: Vec<&'static str>,
    key: Vec<Option<String>>,
    scope: Vec<String>,
    decision: Vec<String>,
    value: Vec<Option<String>>,
    rationale: Vec<String>,
    constraints: Vec<String>,
    alternatives: Vec<String>,
    consequences: Vec<String>,
    confidence: Vec<Option<f64>>,
    refs: Vec<String>,
    supersedes: Vec<Option<String>>,
    superseded_by: Vec<Option<String>>,
    rejected_reason: Vec<Option<String>>,
}

fn json_list(items: &[String]) -> String {
    serde_json::to_string(items).expect("strings serialize")
}

impl DecisionRows {
    fn push(&mut self, created: NewDecision<'_>) {
        let (event, decision) = (created.event, &created.content);
        self.decision_id.push(event.event_id.clone());
        self.seq.push(event.seq);
        self.ts.push(event.ts);
        self.session_id.push(event.session_id.clone());
        self.channel.push(event.channel);
        self.sensitivity.push(event.sensitivity);
        self.actor_id.push(event.actor_id.clone());
        self.tags.push(json_list(&event.tags));
        self.status.push(created.status);
        self.key.push(decision.key.map(str::to_owned));
        self.scope
            .push(decision.scope.unwrap_or("project").to_owned());
        self.decision
            .push(event.protect(decision.decision.unwrap_or_default().to_owned()));
        self.value.push(
            decision
                .value
                .as_ref()
                .map(|value| event.protect_json(value.clone()).to_string()),
        );
        for (column, items) in [
            (&mut self.rationale, &decision.rationale),
            (&mut self.constraints, &decision.constraints),
            (&mut self.alternatives, &decision.alternatives),
            (&mut self.consequences, &decision.consequences),
        ] {
            column.push(json_list(&event.protect_all(items)));
        }
        self.confidence.push(decision.confidence);
        self.refs.push(json_list(&event.refs));
        self.supersedes.push(decision.supersedes.map(str::to_owned));
        self.superseded_by.push(created.superseded_by);
        self.rejected_reason.push(created.rejected_reason);
    }

    async fn insert(self, tx: &mut PgConnection, tenant: &str) -> Result<(), sqlx::Error> {
        sqlx::query!(
            "INSERT INTO decisions (tenant_id, decision_id, seq, ts, session_id, channel, sensitivity,
                                    actor_id, tags, status, key, scope, decision, value, rationale,
                                    constraints, alternatives, consequences, confidence, refs,
                                    supersedes, superseded_by, rejected_reason)
             SELECT $1, u.decision_id, u.seq, u.ts, u.session_id, u.channel, u.sensitivity,
                    u.actor_id, ARRAY(SELECT jsonb_array_elements_text(u.tags::jsonb)), u.status,
                    u.key, u.scope, u.decision, u.value::jsonb,
                    ARRAY(SELECT jsonb_array_elements_text(u.rationale::jsonb)),
                    ARRAY(SELECT jsonb_array_elements_text(u.constraints::jsonb)),
                    ARRAY(SELECT jsonb_array_elements_text(u.alternatives::jsonb)),
                    ARRAY(SELECT jsonb_array_elements_text(u.consequences::jsonb)),
                    u.confidence, ARRAY(SELECT jsonb_array_elements_text(u.refs::jsonb)),
                    u.supersedes, u.superseded_by, u.rejected_reason
               FROM unnest($2::text[], $3::bigint[], $4::timestamptz[], $5::text[], $6::text[],
                           $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                           $12::text[], $13::text[], $14::text[], $15::text[], $16::text[],
                           $17::text[], $18::text[], $19::float8[], $20::text[], $21::text[],
                           $22::text[], $23::text[])
                    AS u (decision_id, seq, ts, session_id, channel, sensitivity, actor_id, tags,
                          status, key, scope, decision, value, rationale, constraints,
                          alternatives, consequences, confidence, refs, supersedes,
                          superseded_by, rejected_reason)",
            tenant,
            &self.decision_id,
            &self.seq,
            &self.ts,
            &self.session_id,
            &self.channel as &[Channel],
            &self.sensitivity as &[Sensitivity],
            &self.actor_id,
            &self.tags,
            &self.status as &[&str],
            &self.key as &[Option<String>],
            &self.scope,
            &self.decision,
            &self.value as &[Option<String>],
            &self.rationale,
            &self.constraints,
            &self.alternatives,
            &self.consequences,
            &self.confidence as &[Option<f64>],
            &self.refs,
            &self.supersedes as &[Option<String>],
            &self.superseded_by as &[Option<String>],
            &self.rejected_reason as &[Option<String>],
        )
        .execute(tx)
        .await?;
        Ok(())
    }
}

async fn insert_summaries(
    tx: &mut PgConnection,
    tenant: &str,
    summaries: Vec<CheckedSummary<'_>>,
) -> Result<(), sqlx::Error> {
    if summaries.is_empty() {
        return Ok(());
    }
    let mut event_id = Vec::new();
    let mut seq = Vec::new();
    let mut ts = Vec::new();
    let mut session_id = Vec::new();
    let mut channel = Vec::new();
    let mut sensitivity = Vec::new();
    let mut text = Vec::new();
    let mut refs = Vec::new();
    let mut claims = Vec::new();
    let mut conflicted = Vec::new();
    let mut conflicts = Vec::new();
    for CheckedSummary {
        event,
        text: summary_text,
        claims: event_claims,
        conflicts: event_conflicts,
    } in summaries
    {
        event_id.push(event.event_id.clone());
        seq.push(event.seq);
        ts.push(event.ts);
        session_id.push(event.session_id.clone());
        channel.push(event.channel);
        sensitivity.push(event.sensitivity);
        text.push(event.protect(summary_text.unwrap_or_default().to_owned()));
        refs.push(json_list(&event.refs));
        claims.push(event.protect_json(event_claims).to_string());
        conflicted.push(!event_conflicts.is_empty());
        conflicts.push(
            event
                .protect_json(Value::Array(event_conflicts))
                .to_string(),
        );
    }
    sqlx::query!(
        "INSERT INTO summaries (tenant_id, event_id, seq, ts, session_id, channel, sensitivity,
                                text, refs, claims, conflicted, conflicts)
         SELECT $1, u.event_id, u.seq, u.ts, u.session_id, u.channel, u.sensitivity, u.text,
                ARRAY(SELECT jsonb_array_elements_text(u.refs::jsonb)), u.claims::jsonb,
                u.conflicted, u.conflicts::jsonb
           FROM unnest($2::text[], $3::bigint[], $4::timestamptz[], $5::text[], $6::text[],
                       $7::text[], $8::text[], $9::text[], $10::text[], $11::bool[], $12::text[])
                AS u (event_id, seq, ts, session_id, channel, sensitivity, text, refs, claims,
                      conflicted, conflicts)",
        tenant,
        &event_id,
        &seq,
        &ts,
        &session_id,
        &channel as &[Channel],
        &sensitivity as &[Sensitivity],
        &text,
        &refs,
        &claims,
        &conflicted,
        &conflicts,
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Whether a summary's claim agrees with a decision. A decision that states
/// a `value` is compared with it (strings case- and space-insensitively);
/// otherwise the claim must appear as whole words in the decision's text.
pub fn agrees(claim: &Value, decided_value: Option<&Value>, decided_text: &str) -> bool {
    match decided_value {
        Some(decided) => fold_json(claim) == fold_json(decided),
        None => {
            let claim = fold(&claim_text(claim));
            let text = fold(decided_text);
            !claim.is_empty()
                && (text == claim
                    || format!(" {} ", words(&text)).contains(&format!(" {} ", words(&claim))))
        }
    }
}

fn claim_text(claim: &Value) -> String {
    match claim {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn fold(text: &str) -> String {
    text.split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Lowercase words with punctuation dropped, joined by single spaces.
fn words(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric() && c != '.' && c != '-' && c != '_')
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn fold_json(value: &Value) -> Value {
    match value {
        Value::String(text) => Value::String(fold(text)),
        Value::Array(items) => Value::Array(items.iter().map(fold_json).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| (key.clone(), fold_json(value)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_compare_with_the_decided_value() {
        assert!(agrees(
            &json!("PostgreSQL"),
            Some(&json!("postgresql")),
            "x"
        ));
        assert!(!agrees(&json!("MySQL"), Some(&json!("PostgreSQL")), "x"));
        assert!(agrees(&json!(15), Some(&json!(15)), "x"));
    }

    #[test]
    fn claims_without_a_value_match_whole_words_of_the_decision() {
        let text = "Use PostgreSQL 15 as the only store.";
        assert!(agrees(&json!("postgresql 15"), None, text));
        assert!(agrees(&json!("PostgreSQL"), None, text));
        assert!(!agrees(&json!("MySQL"), None, text));
        assert!(
            !agrees(&json!("Postgres"), None, text),
            "a prefix is not a word"
        );
        assert!(!agrees(&json!(""), None, text));
    }
}
