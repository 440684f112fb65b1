//! `handoffs`: the packets agents hand each other (PRD A6), one row per
//! `handoff` event. A receiving agent's bundle shows the packet instead of
//! the sender's transcript; its inbox lists the packets it has not
//! accepted yet (a packet is accepted by the receiver's first event that
//! cites it).

use sqlx::PgConnection;

use crate::projector::{Fold, Table};

use memd_core::{
    content::Content,
    event::{ActorType, Kind, StoredEvent},
};

const TABLES: &[Table] = &[Table {
    name: "handoffs",
    key: &["tenant_id", "handoff_id"],
}];

pub struct HandoffProjector;

impl Fold for HandoffProjector {
    const NAME: &'static str = "handoffs";
    /// 2: packets are accepted by the receiver's first event citing them
    /// (`accepted_seq`, `accepted_by`), so every kind is read.
    const VERSION: i32 = 2;
    const TABLES: &'static [Table] = TABLES;
    const KINDS: &'static [Kind] = Kind::ALL;

    async fn fold<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: Vec<&'a StoredEvent>,
    ) -> Result<(), sqlx::Error> {
        for event in events {
            if event.kind != Kind::Handoff {
                // Content is read only for packets: most events just cite.
                if event.refs.iter().any(|r| r.starts_with("evt_")) {
                    accept(tx, tenant, event).await?;
                }
                continue;
            }
            if let Content::Handoff(handoff) = event.shape() {
                let (Some(to_agent), Some(task)) = (handoff.to_agent, handoff.task) else {
                    continue;
                };
                sqlx::query!(
                    "INSERT INTO handoffs (tenant_id, handoff_id, seq, ts, session_id, channel,
                                           sensitivity, from_agent, to_agent, task, task_id,
                                           constraints, decision_ids, required_files,
                                           open_questions, refs)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
                    tenant,
                    &event.event_id,
                    event.seq,
                    event.ts,
                    &event.session_id,
                    event.channel.as_str(),
                    event.sensitivity.as_str(),
                    &event.actor_id,
                    to_agent,
                    event.protect(task.to_owned()),
                    handoff.task_id,
                    &event.protect_all(&handoff.constraints),
                    &handoff.decision_ids as &[&str],
                    &event.protect_all(&handoff.required_files),
                    &event.protect_all(&handoff.open_questions),
                    &event.refs
                )
                .execute(&mut *tx)
                .await?;
            }
        }
        Ok(())
    }
}

/// The packets `event` accepts: those it cites that were addressed to the
/// agent that records it (its `agent_id`, or its actor when that is an
/// agent) and are still pending. Only a statement for events that cite an
/// event at all.
async fn accept(
    tx: &mut PgConnection,
    tenant: &str,
    event: &StoredEvent,
) -> Result<(), sqlx::Error> {
    let agent = event
        .agent_id
        .as_deref()
        .or_else(|| (event.actor_type == ActorType::Agent).then_some(event.actor_id.as_str()));
    let Some(agent) = agent else {
        return Ok(());
    };
    sqlx::query!(
        "UPDATE handoffs SET accepted_seq = $4, accepted_by = $5
          WHERE tenant_id = $1 AND handoff_id = ANY ($2) AND to_agent = $3
            AND accepted_seq IS NULL AND seq < $4",
        tenant,
        &event.refs,
        agent,
        event.seq,
        &event.event_id
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}
