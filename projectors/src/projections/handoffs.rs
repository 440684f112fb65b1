//! `handoffs`: the packets agents hand each other (PRD A6), one row per
//! `handoff` event. A receiving agent's bundle shows the packet instead of
//! the sender's transcript.

use sqlx::PgConnection;

use crate::{
    content::Content,
    event::{Kind, StoredEvent},
    projector::{Fold, Table},
};

const TABLES: &[Table] = &[Table {
    name: "handoffs",
    key: &["tenant_id", "handoff_id"],
}];

pub struct HandoffProjector;

impl Fold for HandoffProjector {
    const NAME: &'static str = "handoffs";
    const VERSION: i32 = 1;
    const TABLES: &'static [Table] = TABLES;
    const KINDS: &'static [Kind] = &[Kind::Handoff];

    async fn fold<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: Vec<&'a StoredEvent>,
    ) -> Result<(), sqlx::Error> {
        for event in events {
            let Content::Handoff(handoff) = event.shape() else {
                continue;
            };
            let (Some(to_agent), Some(task)) = (handoff.to_agent, handoff.task) else {
                continue;
            };
            sqlx::query(
                "INSERT INTO handoffs (tenant_id, handoff_id, seq, ts, session_id, channel,
                                       sensitivity, from_agent, to_agent, task, task_id,
                                       constraints, decision_ids, required_files,
                                       open_questions, refs)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
            )
            .bind(tenant)
            .bind(&event.event_id)
            .bind(event.seq)
            .bind(event.ts)
            .bind(&event.session_id)
            .bind(&event.channel)
            .bind(&event.sensitivity)
            .bind(&event.actor_id)
            .bind(to_agent)
            .bind(event.protect(task.to_owned()))
            .bind(handoff.task_id)
            .bind(event.protect_all(&handoff.constraints))
            .bind(&handoff.decision_ids)
            .bind(event.protect_all(&handoff.required_files))
            .bind(event.protect_all(&handoff.open_questions))
            .bind(&event.refs)
            .execute(&mut *tx)
            .await?;
        }
        Ok(())
    }
}
