//! `tasks`: the latest state of each task, from `task_update` events.

use std::collections::BTreeMap;

use sqlx::PgConnection;

use crate::{
    projector::{Fold, Table},
    retraction::{self, Step},
};

use memd_core::{
    content::{Content, TaskUpdate},
    event::{Channel, Kind, Sensitivity, StoredEvent, read_ids},
    seal::{Keyring, SEALED_PREFIX},
};

const TABLES: &[Table] = &[
    Table {
        name: "tasks",
        key: &["tenant_id", "task_id"],
    },
    // Which events updated each task, a row per update: appended, so that
    // a task updated thousands of times costs each batch only its own.
    Table {
        name: "task_events",
        key: &["tenant_id", "task_id", "seq"],
    },
];

pub struct TaskProjector;

impl Fold for TaskProjector {
    const NAME: &'static str = "tasks";
    /// 2: a data subject's update seals the task's text (version 1 sealed
    /// by sensitivity alone, so a subject's task of sensitivity `none`
    /// kept its title in the clear).
    const VERSION: i32 = 2;
    const TABLES: &'static [Table] = TABLES;
    const KINDS: &'static [Kind] = &[Kind::TaskUpdate, Kind::Retraction];

    async fn fold<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: Vec<&'a StoredEvent>,
    ) -> Result<(), sqlx::Error> {
        for step in retraction::steps(events) {
            match step {
                Step::Fold(events) => fold_updates(tx, tenant, events).await?,
                Step::Withdraw(retraction) => withdraw(tx, tenant, retraction).await?,
            }
        }
        Ok(())
    }
}

/// The tasks a retraction withdraws updates of are folded again from
/// their other updates, read back from the log (a task none is left of is
/// gone): status, title and details are then what the remaining updates
/// said, as if the withdrawn one had never been recorded.
async fn withdraw(
    tx: &mut PgConnection,
    tenant: &str,
    retraction: &StoredEvent,
) -> Result<(), sqlx::Error> {
    let touched: Vec<String> = sqlx::query_scalar!(
        "DELETE FROM task_events WHERE tenant_id = $1 AND event_id = ANY ($2) RETURNING task_id",
        tenant,
        &retraction.refs
    )
    .fetch_all(&mut *tx)
    .await?;
    for task_id in touched
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
    {
        let remaining: Vec<String> = sqlx::query_scalar!(
            "SELECT event_id FROM task_events WHERE tenant_id = $1 AND task_id = $2 ORDER BY seq",
            tenant,
            &task_id
        )
        .fetch_all(&mut *tx)
        .await?;
        let events = read_ids(&mut *tx, &retraction.keyring, tenant, &remaining).await?;
        let mut updates = events.iter().filter_map(Update::of);
        let Some(first) = updates.next() else {
            sqlx::query!(
                "DELETE FROM tasks WHERE tenant_id = $1 AND task_id = $2",
                tenant,
                &task_id
            )
            .execute(&mut *tx)
            .await?;
            continue;
        };
        let mut task = Task::new(&first);
        for update in updates {
            task.update(&update);
        }
        upsert(tx, tenant, &retraction.keyring, std::iter::once(task)).await?;
    }
    Ok(())
}

async fn fold_updates(
    tx: &mut PgConnection,
    tenant: &str,
    events: Vec<&StoredEvent>,
) -> Result<(), sqlx::Error> {
    let updates: Vec<Update<'_>> = events.into_iter().filter_map(Update::of).collect();
    if updates.is_empty() {
        return Ok(());
    }
    // Folded in memory, each task written once per batch: a rebuild
    // is one transaction, and a row updated thousands of times in
    // one transaction leaves versions every later lookup walks.
    let ids: Vec<&str> = updates.iter().map(|u| u.task_id).collect();
    // `sealed` is told by the title, once opened below.
    let mut tasks: BTreeMap<String, Task> = sqlx::query_as!(
        Task,
        r#"SELECT task_id, status, title, details, refs, session_id,
                  channel AS "channel: Channel", sensitivity AS "sensitivity: Sensitivity",
                  first_seq, last_seq, updated_at, false AS "sealed!"
             FROM tasks WHERE tenant_id = $1 AND task_id = ANY ($2)"#,
        tenant,
        &ids as &[&str]
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|task| (task.task_id.clone(), task))
    .collect();
    // Folded as plaintext, sealed again as written.
    let keyring = updates[0].event.keyring.clone();
    for task in tasks.values_mut() {
        task.sealed = task.title.starts_with(SEALED_PREFIX);
        keyring
            .open_in_place(tenant, &mut task.title)
            .and_then(|()| keyring.open_in_place(tenant, &mut task.details))
            .map_err(|error| sqlx::Error::Protocol(format!("task of {tenant}: {error}")))?;
    }
    for update in &updates {
        match tasks.get_mut(update.task_id) {
            Some(task) => task.update(update),
            None => {
                tasks.insert(update.task_id.to_owned(), Task::new(update));
            }
        }
    }
    upsert(tx, tenant, &keyring, tasks.into_values()).await?;
    record_updates(tx, tenant, &updates).await
}

/// A `task_update` event that names its task.
struct Update<'a> {
    task_id: &'a str,
    content: TaskUpdate<'a>,
    event: &'a StoredEvent,
}

impl<'a> Update<'a> {
    fn of(event: &'a StoredEvent) -> Option<Self> {
        let Content::TaskUpdate(content) = event.shape() else {
            return None;
        };
        Some(Update {
            task_id: content.task_id?,
            content,
            event,
        })
    }
}

/// One row of `tasks`.
#[derive(Debug, Clone)]
struct Task {
    task_id: String,
    status: String,
    title: String,
    details: String,
    refs: Vec<String>,
    session_id: String,
    channel: Channel,
    sensitivity: Sensitivity,
    first_seq: i64,
    last_seq: i64,
    updated_at: chrono::DateTime<chrono::Utc>,
    /// Whether its text is kept sealed: some update of it was (a data
    /// subject's, or of a sealed sensitivity). Sticky, like sensitivity: a
    /// title a subject's update set must not be written in the clear
    /// because a later update of the task is not the subject's.
    sealed: bool,
}

impl Task {
    fn new(update: &Update<'_>) -> Self {
        let event = update.event;
        let mut task = Task {
            task_id: update.task_id.to_owned(),
            status: String::new(),
            title: update.content.title.unwrap_or(update.task_id).to_owned(),
            details: String::new(),
            refs: Vec::new(),
            session_id: String::new(),
            channel: event.channel,
            sensitivity: event.sensitivity,
            first_seq: event.seq,
            last_seq: event.seq,
            updated_at: event.ts,
            sealed: false,
        };
        task.update(update);
        task
    }

    /// Status, channel and refs follow the latest update; a title or
    /// details left out of an update keep their earlier value; sensitivity
    /// is the highest any update carried, so a task never becomes more
    /// visible than what was said about it.
    fn update(&mut self, update: &Update<'_>) {
        let (content, event) = (&update.content, update.event);
        self.status = content.status.unwrap_or("open").to_owned();
        if let Some(title) = content.title {
            self.title = title.to_owned();
        }
        if let Some(details) = content.details {
            self.details = details.to_owned();
        }
        self.refs = event.refs.clone();
        self.session_id = event.session_id.clone();
        self.channel = event.channel;
        self.sealed |= event.sealer.is_some();
        self.sensitivity = self.sensitivity.max(event.sensitivity);
        self.last_seq = event.seq;
        self.updated_at = event.ts;
    }
}

async fn upsert(
    tx: &mut PgConnection,
    tenant: &str,
    keyring: &Keyring,
    tasks: impl Iterator<Item = Task>,
) -> Result<(), sqlx::Error> {
    let json = |items: &[String]| serde_json::to_string(items).expect("strings serialize");
    let mut task_id = Vec::new();
    let mut status = Vec::new();
    let mut title = Vec::new();
    let mut details = Vec::new();
    let mut refs = Vec::new();
    let mut session_id = Vec::new();
    let mut channel = Vec::new();
    let mut sensitivity = Vec::new();
    let mut first_seq = Vec::new();
    let mut last_seq = Vec::new();
    let mut updated_at = Vec::new();
    for task in tasks {
        task_id.push(task.task_id);
        status.push(task.status);
        // Sealed under the process's key, as every row derived from a
        // subject's event is (erasure rebuilds them without it).
        let sealer = if task.sealed || task.sensitivity.is_sealed() {
            keyring.sealer(tenant)
        } else {
            None
        };
        match sealer {
            Some(sealer) => {
                title.push(sealer.seal(&task.title));
                details.push(sealer.seal(&task.details));
            }
            None => {
                title.push(task.title);
                details.push(task.details);
            }
        }
        refs.push(json(&task.refs));
        session_id.push(task.session_id);
        channel.push(task.channel);
        sensitivity.push(task.sensitivity);
        first_seq.push(task.first_seq);
        last_seq.push(task.last_seq);
        updated_at.push(task.updated_at);
    }
    sqlx::query!(
        "INSERT INTO tasks (tenant_id, task_id, status, title, details, refs,
                            session_id, channel, sensitivity, first_seq, last_seq, updated_at)
         SELECT $1, u.task_id, u.status, u.title, u.details,
                ARRAY(SELECT jsonb_array_elements_text(u.refs::jsonb)),
                u.session_id, u.channel, u.sensitivity, u.first_seq, u.last_seq, u.updated_at
           FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                       $7::text[], $8::text[], $9::text[], $10::bigint[], $11::bigint[],
                       $12::timestamptz[])
                AS u (task_id, status, title, details, refs, session_id, channel,
                      sensitivity, first_seq, last_seq, updated_at)
         ON CONFLICT (tenant_id, task_id) DO UPDATE SET
             status = EXCLUDED.status, title = EXCLUDED.title, details = EXCLUDED.details,
             refs = EXCLUDED.refs, session_id = EXCLUDED.session_id, channel = EXCLUDED.channel,
             sensitivity = EXCLUDED.sensitivity, first_seq = EXCLUDED.first_seq,
             last_seq = EXCLUDED.last_seq, updated_at = EXCLUDED.updated_at",
        tenant,
        &task_id,
        &status,
        &title,
        &details,
        &refs,
        &session_id,
        &channel as &[Channel],
        &sensitivity as &[Sensitivity],
        &first_seq,
        &last_seq,
        &updated_at
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// One `task_events` row per update of the batch.
async fn record_updates(
    tx: &mut PgConnection,
    tenant: &str,
    updates: &[Update<'_>],
) -> Result<(), sqlx::Error> {
    let task_ids: Vec<&str> = updates.iter().map(|u| u.task_id).collect();
    let seqs: Vec<i64> = updates.iter().map(|u| u.event.seq).collect();
    let event_ids: Vec<&str> = updates.iter().map(|u| u.event.event_id.as_str()).collect();
    sqlx::query!(
        "INSERT INTO task_events (tenant_id, task_id, seq, event_id)
         SELECT $1, u.task_id, u.seq, u.event_id
           FROM unnest($2::text[], $3::bigint[], $4::text[]) AS u (task_id, seq, event_id)",
        tenant,
        &task_ids as &[&str],
        &seqs,
        &event_ids as &[&str]
    )
    .execute(tx)
    .await?;
    Ok(())
}
