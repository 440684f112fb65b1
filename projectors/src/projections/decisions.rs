//! `decisions` (the ledger) and `summaries` (with conflict flags).
//!
//! One projector owns both tables because a summary is checked against the
//! ledger as it stood at the summary's seq: applying both in one ordered
//! pass keeps that check deterministic on replay.

use serde_json::{Value, json};
use sqlx::{PgConnection, Row};

use crate::{
    event::StoredEvent,
    projector::{BoxFuture, Projector, Table},
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

impl Projector for DecisionProjector {
    fn name(&self) -> &'static str {
        "decisions"
    }

    fn version(&self) -> i32 {
        1
    }

    fn tables(&self) -> &'static [Table] {
        TABLES
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            for event in events {
                match event.kind.as_str() {
                    "decision" => record_decision(tx, tenant, event).await?,
                    "summary" => record_summary(tx, tenant, event).await?,
                    _ => {}
                }
            }
            Ok(())
        })
    }
}

/// Refs that name no event of this tenant recorded before `seq`. A ref is
/// an event id, or a chunk id (`chk_<ulid>_<part>`, from `evt_<ulid>`).
async fn missing_refs(
    tx: &mut PgConnection,
    tenant: &str,
    refs: &[String],
    seq: i64,
) -> Result<Vec<String>, sqlx::Error> {
    if refs.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar(
        r"SELECT r FROM unnest($2::text[]) WITH ORDINALITY AS u (r, o)
           WHERE NOT EXISTS (
                 SELECT 1 FROM public.events e
                  WHERE e.tenant_id = $1 AND e.seq < $3
                    AND e.event_id = CASE WHEN r LIKE 'chk\_%'
                                          THEN 'evt_' || split_part(substr(r, 5), '_', 1)
                                          ELSE r END)
           ORDER BY o",
    )
    .bind(tenant)
    .bind(refs)
    .bind(seq)
    .fetch_all(tx)
    .await
}

async fn record_decision(
    tx: &mut PgConnection,
    tenant: &str,
    event: &StoredEvent,
) -> Result<(), sqlx::Error> {
    let key = event.text("key").map(str::to_owned);
    let supersedes = event.text("supersedes").map(str::to_owned);
    let rejected = rejection(tx, tenant, event, supersedes.as_deref()).await?;
    if rejected.is_none() {
        sqlx::query(
            "UPDATE decisions SET status = 'superseded', superseded_by = $2
              WHERE tenant_id = $1 AND status = 'active'
                AND (decision_id = $3 OR (key IS NOT NULL AND key = $4))",
        )
        .bind(tenant)
        .bind(&event.event_id)
        .bind(&supersedes)
        .bind(&key)
        .execute(&mut *tx)
        .await?;
    }
    let status = if rejected.is_some() {
        "rejected"
    } else {
        "active"
    };
    sqlx::query(
        "INSERT INTO decisions (tenant_id, decision_id, seq, ts, session_id, channel, sensitivity,
                                actor_id, tags, status, key, scope, decision, value, rationale,
                                constraints, alternatives, consequences, confidence, refs,
                                supersedes, superseded_by, rejected_reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
                 $19, $20, $21, NULL, $22)",
    )
    .bind(tenant)
    .bind(&event.event_id)
    .bind(event.seq)
    .bind(event.ts)
    .bind(&event.session_id)
    .bind(&event.channel)
    .bind(&event.sensitivity)
    .bind(&event.actor_id)
    .bind(&event.tags)
    .bind(status)
    .bind(&key)
    .bind(event.text("scope").unwrap_or("project"))
    .bind(event.text("decision").unwrap_or_default())
    .bind(event.content.get("value"))
    .bind(event.strings("rationale"))
    .bind(event.strings("constraints"))
    .bind(event.strings("alternatives"))
    .bind(event.strings("consequences"))
    .bind(event.content.get("confidence").and_then(Value::as_f64))
    .bind(&event.refs)
    .bind(&supersedes)
    .bind(rejected)
    .execute(tx)
    .await?;
    Ok(())
}

/// Why a decision cannot enter the ledger, if it cannot (P4: every decision
/// cites the evidence it rests on).
async fn rejection(
    tx: &mut PgConnection,
    tenant: &str,
    event: &StoredEvent,
    supersedes: Option<&str>,
) -> Result<Option<String>, sqlx::Error> {
    if event.refs.is_empty() {
        return Ok(Some(
            "no refs: a decision must cite the events or chunks it rests on".to_owned(),
        ));
    }
    let missing = missing_refs(tx, tenant, &event.refs, event.seq).await?;
    if !missing.is_empty() {
        return Ok(Some(format!(
            "refs not found among this tenant's earlier events: {}",
            missing.join(", ")
        )));
    }
    if let Some(old) = supersedes {
        let known: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM decisions WHERE tenant_id = $1 AND decision_id = $2)",
        )
        .bind(tenant)
        .bind(old)
        .fetch_one(&mut *tx)
        .await?;
        if !known {
            return Ok(Some(format!(
                "supersedes {old}, which is not an earlier decision of this tenant"
            )));
        }
    }
    Ok(None)
}

async fn record_summary(
    tx: &mut PgConnection,
    tenant: &str,
    event: &StoredEvent,
) -> Result<(), sqlx::Error> {
    let mut conflicts = Vec::new();
    if event.refs.is_empty() {
        conflicts.push(json!({
            "reason": "no_refs",
            "message": "a summary must cite the events it summarizes",
        }));
    } else {
        let missing = missing_refs(tx, tenant, &event.refs, event.seq).await?;
        if !missing.is_empty() {
            conflicts.push(json!({
                "reason": "missing_refs",
                "message": "refs not found among this tenant's earlier events",
                "refs": missing,
            }));
        }
    }
    let claims = event.content.get("claims").cloned().unwrap_or(json!([]));
    for claim in claims.as_array().into_iter().flatten() {
        let (Some(key), Some(value)) =
            (claim.get("key").and_then(Value::as_str), claim.get("value"))
        else {
            continue;
        };
        let decision = sqlx::query(
            "SELECT decision_id, decision, value, refs FROM decisions
              WHERE tenant_id = $1 AND key = $2 AND status = 'active'
              ORDER BY seq DESC LIMIT 1",
        )
        .bind(tenant)
        .bind(key)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(decision) = decision else { continue };
        let decided: String = decision.get("decision");
        let decided_value: Option<Value> = decision.get("value");
        if agrees(value, decided_value.as_ref(), &decided) {
            continue;
        }
        conflicts.push(json!({
            "reason": "contradicts_decision",
            "message": format!("claims {key} = {value}, but the active decision says otherwise"),
            "key": key,
            "claim": value,
            "summary_refs": event.refs,
            "decision_id": decision.get::<String, _>("decision_id"),
            "decision": decided,
            "decision_value": decided_value,
            "decision_refs": decision.get::<Vec<String>, _>("refs"),
        }));
    }
    sqlx::query(
        "INSERT INTO summaries (tenant_id, event_id, seq, ts, session_id, channel, sensitivity,
                                text, refs, claims, conflicted, conflicts)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(tenant)
    .bind(&event.event_id)
    .bind(event.seq)
    .bind(event.ts)
    .bind(&event.session_id)
    .bind(&event.channel)
    .bind(&event.sensitivity)
    .bind(event.text("text").unwrap_or_default())
    .bind(&event.refs)
    .bind(&claims)
    .bind(!conflicts.is_empty())
    .bind(Value::Array(conflicts))
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
