//! `tasks`: the latest state of each task, from `task_update` events.

use sqlx::PgConnection;

use crate::{
    event::StoredEvent,
    projector::{BoxFuture, Projector, Table},
};

const TABLES: &[Table] = &[Table {
    name: "tasks",
    key: &["tenant_id", "task_id"],
}];

pub struct TaskProjector;

impl Projector for TaskProjector {
    fn name(&self) -> &'static str {
        "tasks"
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
            for event in events.iter().filter(|e| e.kind == "task_update") {
                upsert(tx, tenant, event).await?;
            }
            Ok(())
        })
    }
}

/// Status, channel and refs follow the latest update; a title or details
/// left out of an update keep their earlier value; sensitivity is the
/// highest any update carried, so a task never becomes more visible than
/// what was said about it.
async fn upsert(
    tx: &mut PgConnection,
    tenant: &str,
    event: &StoredEvent,
) -> Result<(), sqlx::Error> {
    let Some(task_id) = event.text("task_id") else {
        return Ok(());
    };
    sqlx::query(
        "INSERT INTO tasks AS t (tenant_id, task_id, status, title, details, refs, event_ids,
                                 session_id, channel, sensitivity, first_seq, last_seq, updated_at)
         VALUES ($1, $2, $3, coalesce($4, $2), coalesce($5, ''), $6, ARRAY[$7], $8, $9, $10,
                 $11, $11, $12)
         ON CONFLICT (tenant_id, task_id) DO UPDATE SET
             status = EXCLUDED.status,
             title = coalesce($4, t.title),
             details = coalesce($5, t.details),
             refs = EXCLUDED.refs,
             event_ids = t.event_ids || EXCLUDED.event_ids,
             session_id = EXCLUDED.session_id,
             channel = EXCLUDED.channel,
             sensitivity = CASE
                 WHEN array_position(ARRAY['none', 'low', 'high', 'secret'], EXCLUDED.sensitivity)
                    > array_position(ARRAY['none', 'low', 'high', 'secret'], t.sensitivity)
                 THEN EXCLUDED.sensitivity ELSE t.sensitivity END,
             last_seq = EXCLUDED.last_seq,
             updated_at = EXCLUDED.updated_at",
    )
    .bind(tenant)
    .bind(task_id)
    .bind(event.text("status").unwrap_or("open"))
    .bind(event.text("title"))
    .bind(event.text("details"))
    .bind(&event.refs)
    .bind(&event.event_id)
    .bind(&event.session_id)
    .bind(&event.channel)
    .bind(&event.sensitivity)
    .bind(event.seq)
    .bind(event.ts)
    .execute(tx)
    .await?;
    Ok(())
}
