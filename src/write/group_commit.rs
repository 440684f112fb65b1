//! Group commit: appends of one tenant that arrive while its previous
//! transaction is running are merged into the next one.
//!
//! Appends of a tenant are serialized by its head-row lock anyway, so one
//! transaction per request caps a tenant at roughly one commit per
//! (round trips + fsync). With a writer task per tenant draining a queue,
//! 32 agents of one tenant share commits instead of queuing on the lock.
//! Each request keeps its own all-or-nothing outcome: a merged group that
//! fails is retried request by request, so one bad request cannot fail others.
//! Across daemons, the database lock still serializes correctly.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

use memd_core::seal::Keyring;

use super::append::{AppendError, Appended, Head, append_after};
use crate::domain::{event::NewEvent, tenant::TenantId};

/// Events merged into one transaction at most (a single request may exceed it alone).
const MAX_GROUP_EVENTS: usize = 2_000;
/// Requests a tenant's queue holds before callers wait (backpressure).
const QUEUE_DEPTH: usize = 1_024;
/// How long a new writer waits for the request it was started for (its
/// sender may have been cancelled before sending).
const FIRST_REQUEST_WAIT: Duration = Duration::from_secs(1);

type Reply = Result<Vec<Appended>, Arc<AppendError>>;

struct Pending {
    events: Vec<NewEvent>,
    reply: oneshot::Sender<Reply>,
}

/// The write side's entry point for the API: appends through per-tenant writers.
pub struct Appender {
    pools: AppendPools,
    /// Seals high and secret events before they are hashed and stored.
    keyring: Keyring,
    writers: Arc<Mutex<HashMap<TenantId, mpsc::Sender<Pending>>>>,
    /// Each tenant's head as this daemon's last append left it, so the next
    /// append can be one statement (checked against the real head there).
    heads: Heads,
}

/// Heads outlive writers, which retire whenever their queue runs dry.
#[derive(Clone, Default)]
struct Heads(Arc<Mutex<HashMap<TenantId, Head>>>);

impl Heads {
    fn get(&self, tenant: &TenantId) -> Option<Head> {
        self.0.lock().expect("heads lock").get(tenant).copied()
    }

    fn set(&self, tenant: &TenantId, head: Option<Head>) {
        let mut heads = self.0.lock().expect("heads lock");
        match head {
            Some(head) => heads.insert(tenant.clone(), head),
            None => heads.remove(tenant),
        };
    }
}

/// The connections appends run on, by what one statement carries.
#[derive(Clone)]
pub struct AppendPools {
    /// Sessions that plan each statement for its values: several events'
    /// rows pay for their planning, and the plan counts them; and the
    /// idempotency keys an append looks up are looked up in the index.
    pub by_values: PgPool,
    /// Sessions that plan each statement once (`db::for_appends`): for a
    /// single event, planning the append statement for its values cost as
    /// much as running it.
    pub planned_once: PgPool,
}

impl AppendPools {
    /// Single events without an idempotency key run on `planned_once`;
    /// the rest on `by_values`. A plan made once for any keys may look
    /// them up by reading all of the tenant's keys, if the tenant's log was
    /// short when it was made (see `write::append`).
    fn for_events(&self, events: &[NewEvent]) -> &PgPool {
        match events {
            [event] if event.idempotency_key.is_none() => &self.planned_once,
            _ => &self.by_values,
        }
    }
}

impl Appender {
    pub fn new(pools: AppendPools, keyring: Keyring) -> Self {
        Self {
            pools,
            keyring,
            writers: Arc::default(),
            heads: Heads::default(),
        }
    }

    /// Appends `events` for `tenant` as one all-or-nothing unit, possibly in
    /// the same transaction as other requests of the same tenant.
    pub async fn append(&self, tenant: &TenantId, events: Vec<NewEvent>) -> Reply {
        let (reply, answer) = oneshot::channel();
        let mut pending = Pending { events, reply };
        loop {
            let writer = self.writer_for(tenant);
            match writer.send(pending).await {
                Ok(()) => break,
                // The writer retired between lookup and send; start another.
                Err(mpsc::error::SendError(returned)) => pending = returned,
            }
        }
        answer
            .await
            .unwrap_or_else(|_| Err(Arc::new(AppendError::WriterStopped)))
    }

    /// Tenants with a writer task now: each retires once its queue is empty.
    pub fn running_writers(&self) -> usize {
        let writers = self.writers.lock().expect("writers lock");
        writers
            .values()
            .filter(|writer| !writer.is_closed())
            .count()
    }

    fn writer_for(&self, tenant: &TenantId) -> mpsc::Sender<Pending> {
        let mut writers = self.writers.lock().expect("writers lock");
        if let Some(writer) = writers.get(tenant)
            && !writer.is_closed()
        {
            return writer.clone();
        }
        let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
        writers.insert(tenant.clone(), sender.clone());
        tokio::spawn(run_writer(
            Writer {
                pools: self.pools.clone(),
                keyring: self.keyring.clone(),
                tenant: tenant.clone(),
                heads: self.heads.clone(),
            },
            receiver,
            sender.downgrade(),
            self.writers.clone(),
        ));
        sender
    }
}

/// What a tenant's writer task appends with.
struct Writer {
    pools: AppendPools,
    keyring: Keyring,
    tenant: TenantId,
    heads: Heads,
}

impl Writer {
    /// Appends `events`, remembering the head it leaves (or forgetting the
    /// head on failure, so the next append asks the database).
    async fn append(&self, events: Vec<NewEvent>) -> Result<Vec<Appended>, AppendError> {
        let known = self.heads.get(&self.tenant);
        let pool = self.pools.for_events(&events);
        match append_after(pool, &self.keyring, &self.tenant, events, known).await {
            Ok((appended, head)) => {
                self.heads.set(&self.tenant, Some(head));
                Ok(appended)
            }
            Err(err) => {
                self.heads.set(&self.tenant, None);
                Err(err)
            }
        }
    }
}

async fn run_writer(
    writer: Writer,
    mut queue: mpsc::Receiver<Pending>,
    // Weak, so that when the Appender (and with it every sender) is dropped,
    // the queue closes and this task ends instead of idling on the pool.
    own: mpsc::WeakSender<Pending>,
    writers: Arc<Mutex<HashMap<TenantId, mpsc::Sender<Pending>>>>,
) {
    // Serve while requests keep arriving during commits; retire as soon as
    // the queue is empty, so an idle tenant holds no task and no connection.
    let mut next = tokio::time::timeout(FIRST_REQUEST_WAIT, queue.recv())
        .await
        .ok()
        .flatten();
    while let Some(first) = next.take() {
        let mut group = vec![first];
        let mut events = group[0].events.len();
        while events < MAX_GROUP_EVENTS {
            match queue.try_recv() {
                Ok(pending) => {
                    events += pending.events.len();
                    group.push(pending);
                }
                Err(_) => break,
            }
        }
        commit_group(&writer, group).await;
        next = queue.try_recv().ok();
    }
    // Retire: leave the map first (new requests start a new writer), then
    // close the queue and still serve whatever slipped in meanwhile.
    {
        let mut map = writers.lock().expect("writers lock");
        let ours = own.upgrade();
        if let (Some(current), Some(ours)) = (map.get(&writer.tenant), ours)
            && current.same_channel(&ours)
        {
            map.remove(&writer.tenant);
        }
    }
    queue.close();
    // `recv`, not `try_recv`: a sender on another thread may hold a permit
    // taken before the close and send a moment after it; `recv` returns
    // None only once no such permit is left. With `try_recv`, that request
    // was dropped unanswered (a 500, "the tenant's writer stopped", found
    // by the pg-outage drill, where many writers retire at once).
    let mut rest = Vec::new();
    while let Some(pending) = queue.recv().await {
        rest.push(pending);
    }
    if !rest.is_empty() {
        commit_group(&writer, rest).await;
    }
}

async fn commit_group(writer: &Writer, mut group: Vec<Pending>) {
    if group.len() == 1 {
        let pending = group.pop().expect("one request");
        let result = writer.append(pending.events).await.map_err(Arc::new);
        let _ = pending.reply.send(result);
        return;
    }
    let merged: Vec<NewEvent> = group
        .iter()
        .flat_map(|p| p.events.iter().cloned())
        .collect();
    match writer.append(merged).await {
        Ok(appended) => {
            let mut appended = appended.into_iter();
            for pending in group {
                let mine = appended.by_ref().take(pending.events.len()).collect();
                let _ = pending.reply.send(Ok(mine));
            }
        }
        // The database is down: every request would wait and fail alike.
        Err(AppendError::Database(err)) if crate::db::unavailable(&err) => {
            let err = Arc::new(AppendError::Database(err));
            for pending in group {
                let _ = pending.reply.send(Err(err.clone()));
            }
        }
        Err(err) => {
            // One request's own fault (a reused key, an erased subject)
            // is that request's answer, not the daemon's trouble.
            if matches!(
                err,
                AppendError::IdempotencyConflict { .. } | AppendError::SubjectErased(_)
            ) {
                tracing::debug!(error = %err, requests = group.len(), "a request of a group commit was refused; retrying its requests one by one");
            } else {
                tracing::warn!(error = %err, requests = group.len(), "group commit failed; retrying its requests one by one");
            }
            for pending in group {
                let result = writer.append(pending.events).await.map_err(Arc::new);
                let _ = pending.reply.send(result);
            }
        }
    }
}
