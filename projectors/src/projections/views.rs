//! `views`: identity, rules, preferences and other documents a person can
//! read and edit (P6). The latest `view_update` of each view wins.

use sqlx::PgConnection;

use crate::{
    event::StoredEvent,
    projector::{BoxFuture, Projector, Table},
};

const TABLES: &[Table] = &[Table {
    name: "views",
    key: &["tenant_id", "view"],
}];

pub struct ViewProjector;

impl Projector for ViewProjector {
    fn name(&self) -> &'static str {
        "views"
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
            for event in events.iter().filter(|e| e.kind == "view_update") {
                let (Some(view), Some(text)) = (event.text("view"), event.text("text")) else {
                    continue;
                };
                sqlx::query(
                    "INSERT INTO views (tenant_id, view, text, event_id, seq, ts, actor_id,
                                        channel, sensitivity)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                     ON CONFLICT (tenant_id, view) DO UPDATE SET
                         text = EXCLUDED.text, event_id = EXCLUDED.event_id,
                         seq = EXCLUDED.seq, ts = EXCLUDED.ts, actor_id = EXCLUDED.actor_id,
                         channel = EXCLUDED.channel, sensitivity = EXCLUDED.sensitivity",
                )
                .bind(tenant)
                .bind(view)
                .bind(text)
                .bind(&event.event_id)
                .bind(event.seq)
                .bind(event.ts)
                .bind(&event.actor_id)
                .bind(&event.channel)
                .bind(&event.sensitivity)
                .execute(&mut *tx)
                .await?;
            }
            Ok(())
        })
    }
}
