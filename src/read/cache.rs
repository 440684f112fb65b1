//! What every bundle of a tenant starts from, kept in memory: its views,
//! active decisions, active tasks (rendered and counted once per fill) and
//! its policy.
//!
//! A policy entry is dropped when a notification says it changed
//! (`memd_policy`; every daemon on the database hears it). A state entry
//! says up to which seq of the log it holds: a bundle compares that with
//! the projected seq it reads for its provenance anyway, so a missed
//! notification (a listener reconnecting) can never serve stale state.
//! When projections have moved past the entry, the events between are
//! asked whether any of them could change the state ([`STATE_KINDS`], a
//! pin): an agent's messages and tool calls, most of a live tenant's log,
//! cannot, and the entry then stands for the new seq without the four
//! statements and the token counting of a reload. A `memd_projected`
//! notification of seq 0, which a rebuild or a projector's new version
//! sends when projections go back, drops the entry.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use memd_core::{
    event::Kind,
    seal::{Keyring, SealError},
};
use memd_projectors::{
    PROJECTED_CHANNEL,
    projections::{
        TokenCounter, decisions::DecisionProjector, tasks::TaskProjector, views::ViewProjector,
    },
    projector::Fold,
    render,
};
use sqlx::PgPool;
use tokio::sync::watch;

use crate::invalidation::Invalidated;

use super::{
    bundle::Item,
    policy::{self, POLICY_CHANNEL, Policy},
    privacy::Visibility,
    recent::{KeptWindow, WindowKey, Windows},
    retrieve,
};
use crate::domain::event::{Channel, Sensitivity};

/// A cached item and what privacy filters look at.
#[derive(Debug, Clone)]
pub struct Visible {
    pub item: Item,
    pub channel: Channel,
    pub sensitivity: Sensitivity,
    /// The agent whose memory it is, if any.
    pub owner: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ViewItem {
    pub view: String,
    pub visible: Visible,
}

#[derive(Debug, Clone)]
pub struct DecisionItem {
    pub decision_id: String,
    pub seq: i64,
    pub visible: Visible,
}

/// A tenant's fast-path state, as of the seq its cache entry says.
#[derive(Debug, Default)]
pub struct TenantState {
    pub views: Vec<ViewItem>,
    /// Active decisions, newest first.
    pub decisions: Vec<DecisionItem>,
    /// The ids of every active decision (also those `decisions` cannot
    /// show): a decision chunk retrieved as evidence whose id is here
    /// stands without asking the database.
    pub active_decision_ids: HashSet<String>,
    /// Open and doing tasks, most recently updated first.
    pub tasks: Vec<Visible>,
    /// Whether any of the tenant's chunks is pinned (whoever may see it):
    /// when none is, a bundle does not ask for pinned memory. Most tenants
    /// pin nothing, and the question cost every bundle a statement that
    /// PostgreSQL plans anew each time (its filters' estimates keep the
    /// generic plan dearer than a custom one).
    pub any_pinned: bool,
    /// The events retractions withdrew: the recent window, read from the
    /// log, leaves them out.
    pub retracted: HashSet<String>,
    /// Where decisions, summaries and tasks stand, as bundles of this state
    /// asked (the recent window's stale items, the evidence's outdated task
    /// updates): a new state starts empty, since what changes a standing
    /// (a decision, a task update) makes a new state.
    pub standings: StandingMemo,
}

/// [`TenantState::standings`]: answers read once per state, not once per
/// bundle.
#[derive(Debug, Default)]
pub struct StandingMemo {
    events: std::sync::Mutex<HashMap<String, Option<retrieve::Standing>>>,
    tasks: std::sync::Mutex<HashMap<String, Option<retrieve::TaskNow>>>,
}

impl StandingMemo {
    /// The standings of `event_ids` (absent: not a decision or summary of
    /// the ledger), reading only those not asked before.
    pub async fn events(
        &self,
        pool: &PgPool,
        keyring: &Keyring,
        tenant: &str,
        event_ids: &[&str],
    ) -> Result<HashMap<String, retrieve::Standing>, sqlx::Error> {
        let missing: Vec<&str> = {
            let known = self.events.lock().expect("standings lock");
            event_ids
                .iter()
                .copied()
                .filter(|id| !known.contains_key(*id))
                .collect()
        };
        if !missing.is_empty() {
            // The parts of one event ask for it once each: any order.
            let read = retrieve::standings(pool, keyring, tenant, &missing).await?;
            let mut known = self.events.lock().expect("standings lock");
            for id in missing {
                known.insert(id.to_owned(), read.get(id).cloned());
            }
        }
        let known = self.events.lock().expect("standings lock");
        Ok(event_ids
            .iter()
            .filter_map(|id| Some(((*id).to_owned(), known.get(*id)?.clone()?)))
            .collect())
    }

    /// The state now of `task_ids` (absent: not projected), reading only
    /// those not asked before.
    pub async fn tasks(
        &self,
        pool: &PgPool,
        tenant: &str,
        task_ids: &[String],
    ) -> Result<HashMap<String, retrieve::TaskNow>, sqlx::Error> {
        let missing: Vec<String> = {
            let known = self.tasks.lock().expect("tasks lock");
            task_ids
                .iter()
                .filter(|id| !known.contains_key(*id))
                .cloned()
                .collect()
        };
        if !missing.is_empty() {
            let read = retrieve::tasks_now(pool, tenant, &missing).await?;
            let mut known = self.tasks.lock().expect("tasks lock");
            for id in missing {
                let now = read.get(&id).cloned();
                known.insert(id, now);
            }
        }
        let known = self.tasks.lock().expect("tasks lock");
        Ok(task_ids
            .iter()
            .filter_map(|id| Some((id.clone(), known.get(id)?.clone()?)))
            .collect())
    }
}

/// The kinds of event that can change a [`TenantState`]: what the views,
/// decisions and tasks projections read (a retraction among them, which
/// also withdraws events the recent window shows), and an erasure (which
/// makes some of their sealed text unreadable). Any other event changes it
/// only by pinning a chunk ([`super::retention::PIN_TAGS`]).
pub const STATE_KINDS: [Kind; 6] = {
    let [view, Kind::Retraction] = *ViewProjector::KINDS else {
        panic!("views read one kind and retractions")
    };
    let [task, Kind::Retraction] = *TaskProjector::KINDS else {
        panic!("tasks read one kind and retractions")
    };
    let [decision, summary, Kind::Retraction] = *DecisionProjector::KINDS else {
        panic!("decisions read two kinds and retractions")
    };
    [
        view,
        task,
        decision,
        summary,
        Kind::Retraction,
        Kind::Erasure,
    ]
};

/// Past this many events, a state entry is read again rather than the
/// events asked whether they change it: the question reads every one of
/// them when none does.
const MAX_EVENTS_ASKED: i64 = 2_000;

/// A tenant's state and the seq of the log it holds up to.
struct CachedState {
    through: i64,
    state: Arc<TenantState>,
}

/// Which query terms are common in a tenant's chunks up to one seq
/// ([`retrieve::common_lexemes`], [`retrieve::judged_through`]): a verdict
/// depends only on that part of the log, who asks (privacy decides which
/// chunks count) and the term's share of the pool, so while that seq
/// stands (an agent writing between its questions, several agents asking
/// one tenant) the statement that reads the newest chunks and counts a
/// term's matches runs once per term. A later seq starts the tenant's
/// verdicts afresh.
struct CommonTerms {
    through: i64,
    verdicts: HashMap<TermKey, bool>,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct TermKey {
    channel: Channel,
    agent: Option<String>,
    share: usize,
    query: String,
}

impl TermKey {
    fn new(visibility: Visibility<'_>, share: usize, query: &str) -> Self {
        Self {
            channel: visibility.channel,
            agent: visibility.agent.map(str::to_owned),
            share,
            query: query.to_owned(),
        }
    }
}

/// Verdicts kept per tenant (about 300 KB), and tenants with verdicts kept
/// (about 80 MB at most): past either, what is kept starts over (a
/// bundle's few terms then cost one statement again).
const MAX_TERMS_KEPT: usize = 2_048;
const MAX_TENANTS_WITH_TERMS: usize = 256;

#[derive(Default)]
struct Entries {
    states: HashMap<String, CachedState>,
    policies: HashMap<String, Arc<Policy>>,
    common: HashMap<String, CommonTerms>,
    /// The part of sessions' recent windows that projections had reached.
    windows: Windows,
    /// How many times an entry was dropped. A bundle notes it before it
    /// reads the database and keeps what it read only if it has not moved:
    /// otherwise a rebuild or a new policy, heard while the read was on its
    /// way, would be undone by putting back what was read before it.
    drops: u64,
}

impl Entries {
    fn dropped(&mut self) {
        self.drops = self.drops.wrapping_add(1);
    }

    /// Drops what is kept of the tenant's projections: its state, its term
    /// verdicts and its sessions' recent windows.
    fn forget_projected(&mut self, tenant: &str) {
        self.states.remove(tenant);
        self.common.remove(tenant);
        self.windows.forget(tenant);
        self.dropped();
    }
}

pub struct ReadCache {
    entries: Mutex<Entries>,
    /// The latest projected seq heard per tenant, for strong consistency.
    projected: watch::Sender<HashMap<String, i64>>,
}

impl Default for ReadCache {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
            projected: watch::Sender::new(HashMap::new()),
        }
    }
}

impl ReadCache {
    /// The tenant's state as of `projected_seq`: the cached one if it holds
    /// that far, or if no event since can change it ([`changed_between`]);
    /// otherwise loaded. The flag says whether it was served from memory.
    pub async fn state(
        &self,
        pool: &PgPool,
        keyring: &Keyring,
        counter: &TokenCounter,
        tenant: &str,
        projected_seq: i64,
    ) -> Result<(Arc<TenantState>, bool), sqlx::Error> {
        let (cached, drops) = {
            let entries = self.lock();
            let cached = entries
                .states
                .get(tenant)
                .map(|entry| (entry.through, entry.state.clone()));
            (cached, entries.drops)
        };
        if let Some((through, state)) = cached {
            if through >= projected_seq {
                return Ok((state, true));
            }
            if projected_seq - through <= MAX_EVENTS_ASKED
                && !changed_between(pool, tenant, through, projected_seq).await?
            {
                self.hold(tenant, projected_seq, &state, drops);
                return Ok((state, true));
            }
        }
        let state = Arc::new(load(pool, keyring, counter, tenant).await?);
        self.hold(tenant, projected_seq, &state, drops);
        Ok((state, false))
    }

    /// Keeps `state` as the tenant's up to `through`, unless an entry that
    /// holds further came in meanwhile, or an entry was dropped since the
    /// caller saw `drops` (what it read may be what the drop was about).
    fn hold(&self, tenant: &str, through: i64, state: &Arc<TenantState>, drops: u64) {
        let mut entries = self.lock();
        if entries.drops == drops
            && entries
                .states
                .get(tenant)
                .is_none_or(|entry| entry.through < through)
        {
            entries.states.insert(
                tenant.to_owned(),
                CachedState {
                    through,
                    state: state.clone(),
                },
            );
        }
    }

    pub async fn policy(&self, pool: &PgPool, tenant: &str) -> Result<Arc<Policy>, sqlx::Error> {
        let drops = {
            let entries = self.lock();
            if let Some(policy) = entries.policies.get(tenant) {
                return Ok(policy.clone());
            }
            entries.drops
        };
        let policy = Arc::new(policy::load(pool, tenant).await?);
        self.keep_policy(tenant, &policy, drops);
        Ok(policy)
    }

    /// Keeps a policy read after the caller saw `drops`, unless an entry
    /// was dropped since (it may have been this policy, stored anew).
    fn keep_policy(&self, tenant: &str, policy: &Arc<Policy>, drops: u64) {
        let mut entries = self.lock();
        if entries.drops == drops {
            entries.policies.insert(tenant.to_owned(), policy.clone());
        }
    }

    /// The verdicts kept for `queries` ([`retrieve::common_lexemes`]) of a
    /// question asked with `visibility`, each term's share `share`, as of
    /// the tenant's chunks up to `through`; `None` where none is kept. And
    /// the drop count that [`Self::keep_common`] wants.
    pub fn common_terms(
        &self,
        tenant: &str,
        through: i64,
        visibility: Visibility<'_>,
        share: usize,
        queries: &[String],
    ) -> (Vec<Option<bool>>, u64) {
        let entries = self.lock();
        let kept = entries
            .common
            .get(tenant)
            .filter(|terms| terms.through == through);
        let verdicts = queries
            .iter()
            .map(|query| {
                kept.and_then(|terms| {
                    terms
                        .verdicts
                        .get(&TermKey::new(visibility, share, query))
                        .copied()
                })
            })
            .collect();
        (verdicts, entries.drops)
    }

    /// Keeps verdicts read as [`Self::common_terms`] describes, unless an
    /// entry was dropped since the caller saw `drops` (a rebuild may have
    /// changed the chunks they were read from) or the tenant's verdicts
    /// already stand for a later seq.
    pub fn keep_common<'q>(
        &self,
        tenant: &str,
        through: i64,
        visibility: Visibility<'_>,
        share: usize,
        verdicts: impl IntoIterator<Item = (&'q String, bool)>,
        drops: u64,
    ) {
        let mut entries = self.lock();
        if entries.drops != drops {
            return;
        }
        if !entries.common.contains_key(tenant) && entries.common.len() >= MAX_TENANTS_WITH_TERMS {
            entries.common.clear();
        }
        let terms = entries
            .common
            .entry(tenant.to_owned())
            .or_insert_with(|| CommonTerms {
                through,
                verdicts: HashMap::new(),
            });
        if terms.through > through {
            return;
        }
        if terms.through < through || terms.verdicts.len() >= MAX_TERMS_KEPT {
            terms.through = through;
            terms.verdicts.clear();
        }
        for (query, common) in verdicts {
            terms
                .verdicts
                .insert(TermKey::new(visibility, share, query), common);
        }
    }

    /// The part of a session's recent window kept by an earlier bundle
    /// ([`super::recent`]), and the drop count that [`Self::keep_window`]
    /// wants.
    pub fn window(&self, key: &WindowKey) -> (Option<Arc<KeptWindow>>, u64) {
        let mut entries = self.lock();
        (entries.windows.get(key), entries.drops)
    }

    /// Keeps the part of a window that projections have reached, unless an
    /// entry was dropped since the caller saw `drops` (a rebuild may have
    /// changed the chunks it was read from) or the window kept for `key`
    /// already reaches further.
    pub fn keep_window(&self, key: WindowKey, window: KeptWindow, drops: u64) {
        let mut entries = self.lock();
        if entries.drops == drops {
            entries.windows.keep(key, window);
        }
    }

    /// Drops the tenant's cached policy: this daemon stored a new one, and
    /// its own next bundle must not wait for the notification to use it.
    pub fn forget_policy(&self, tenant: &str) {
        let mut entries = self.lock();
        entries.policies.remove(tenant);
        entries.dropped();
    }

    /// Waits until projections of `tenant` reach `seq` (as notifications
    /// tell), or `timeout` passes. True when they did.
    pub async fn wait_projected(&self, tenant: &str, seq: i64, timeout: Duration) -> bool {
        let mut heard = self.projected.subscribe();
        let reached = heard.wait_for(|seqs| seqs.get(tenant).is_some_and(|s| *s >= seq));
        matches!(tokio::time::timeout(timeout, reached).await, Ok(Ok(_)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().expect("read cache lock")
    }

    /// Drops every tenant's state, policy, term verdicts and windows.
    pub fn forget_everything(&self) {
        let mut entries = self.lock();
        entries.states.clear();
        entries.policies.clear();
        entries.common.clear();
        entries.windows.clear();
        entries.dropped();
    }

    fn heard_of(&self, channel: &str, payload: &str) {
        if channel == POLICY_CHANNEL {
            let mut entries = self.lock();
            entries.policies.remove(payload);
            entries.dropped();
            return;
        }
        let Some((tenant, seq)) = payload.rsplit_once(':') else {
            return;
        };
        let Ok(seq) = seq.parse::<i64>() else {
            self.lock().forget_projected(tenant);
            return;
        };
        if seq == 0 {
            // Projections went back (`memd_projectors::engine::
            // announce_went_back`). It counts even when no entry is kept: a
            // bundle reading the state meanwhile may have read it before.
            // Any other notice is of projections moving on, which leaves
            // the entries to be checked against the events between: it
            // often arrives after a bundle read the cursors it announces
            // and kept what it read, so a seq at or below an entry's is no
            // sign of going back.
            self.lock().forget_projected(tenant);
        }
        self.projected.send_modify(|seqs| {
            let known = seqs.entry(tenant.to_owned()).or_insert(seq);
            *known = (*known).max(seq);
        });
    }
}

/// Whether any event of the tenant after `from`, up to `to`, can change
/// its [`TenantState`]: one of [`STATE_KINDS`], or one that pins a chunk.
async fn changed_between(
    pool: &PgPool,
    tenant: &str,
    from: i64,
    to: i64,
) -> Result<bool, sqlx::Error> {
    let kinds: Vec<&str> = STATE_KINDS.iter().map(|kind| kind.as_str()).collect();
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT FROM public.events e
                           WHERE e.tenant_id = $1 AND e.seq > $2 AND e.seq <= $3
                             AND (e.kind = ANY ($4) OR e.tags && $5)) AS "changed!""#,
        tenant,
        from,
        to,
        &kinds as &[&str],
        &super::retention::PIN_TAGS[..] as &[&str]
    )
    .fetch_one(pool)
    .await
}

async fn load(
    pool: &PgPool,
    keyring: &Keyring,
    counter: &TokenCounter,
    tenant: &str,
) -> Result<TenantState, sqlx::Error> {
    let views = load_views(pool, keyring, counter, tenant).await?;
    let (decisions, active_decision_ids) = load_decisions(pool, keyring, counter, tenant).await?;
    let tasks = load_tasks(pool, keyring, counter, tenant).await?;
    let any_pinned = retrieve::any_pinned(pool, tenant).await?;
    let retracted: Vec<String> = sqlx::query_scalar!(
        "SELECT DISTINCT event_id FROM projections.chunks
          WHERE tenant_id = $1 AND retracted_by IS NOT NULL",
        tenant
    )
    .fetch_all(pool)
    .await?;
    Ok(TenantState {
        views,
        decisions,
        active_decision_ids,
        tasks,
        any_pinned,
        retracted: retracted.into_iter().collect(),
        standings: StandingMemo::default(),
    })
}

/// The tenant's views (identity, rules, preferences, ...), opened and
/// counted, each with who may see it.
async fn load_views(
    pool: &PgPool,
    keyring: &Keyring,
    counter: &TokenCounter,
    tenant: &str,
) -> Result<Vec<ViewItem>, sqlx::Error> {
    let mut views = sqlx::query!(
        r#"SELECT view, text, event_id, ts, channel AS "channel: Channel",
                  sensitivity AS "sensitivity: Sensitivity", owner
             FROM projections.views WHERE tenant_id = $1 ORDER BY view, owner"#,
        tenant
    )
    .fetch_all(pool)
    .await?;
    for row in &mut views {
        keyring.open_in_place(tenant, &mut row.text)?;
    }
    Ok(views
        .into_iter()
        .filter_map(|row| {
            let (view, text, event_id, ts) = (row.view, row.text, row.event_id, row.ts);
            let (channel, sensitivity, owner) = (row.channel, row.sensitivity, row.owner);
            let meta = render::meta([format!("view {view}").as_str()], ts);
            let item = Item::counted(
                "view",
                format!("view:{view}"),
                meta,
                &text,
                vec![format!("view:{view}"), event_id.clone()],
                counter,
            )?
            .with("view", view.clone())
            .with("event_id", event_id);
            Some(ViewItem {
                view,
                visible: Visible {
                    item,
                    channel,
                    sensitivity,
                    owner: (!owner.is_empty()).then_some(owner),
                },
            })
        })
        .collect())
}

/// The tenant's active decisions, opened and counted, and their ids.
async fn load_decisions(
    pool: &PgPool,
    keyring: &Keyring,
    counter: &TokenCounter,
    tenant: &str,
) -> Result<(Vec<DecisionItem>, HashSet<String>), sqlx::Error> {
    let mut decisions = sqlx::query_as!(
        DecisionRow,
        r#"SELECT decision_id, seq, ts, channel AS "channel: Channel",
                  sensitivity AS "sensitivity: Sensitivity", status, key, scope, decision,
                  rationale, constraints, alternatives, consequences, confidence, refs,
                  supersedes, superseded_by,
                  (SELECT e.agent_id FROM public.events e
                    WHERE e.tenant_id = d.tenant_id AND e.seq = d.seq) AS owner
             FROM projections.decisions d
            WHERE tenant_id = $1 AND status = 'active'
            ORDER BY seq DESC"#,
        tenant
    )
    .fetch_all(pool)
    .await?;
    for row in &mut decisions {
        row.open(keyring, tenant)?;
    }
    let active_decision_ids = decisions.iter().map(|d| d.decision_id.clone()).collect();
    let decisions = decisions
        .into_iter()
        .filter_map(|row| {
            let (decision_id, seq) = (row.decision_id.clone(), row.seq);
            Some(DecisionItem {
                decision_id,
                seq,
                visible: row.into_visible(counter)?,
            })
        })
        .collect();
    Ok((decisions, active_decision_ids))
}

/// The tenant's open tasks, opened and counted.
async fn load_tasks(
    pool: &PgPool,
    keyring: &Keyring,
    counter: &TokenCounter,
    tenant: &str,
) -> Result<Vec<Visible>, sqlx::Error> {
    let mut tasks = sqlx::query_as!(
        TaskRow,
        r#"SELECT task_id, status, title, details, refs,
                  ARRAY(SELECT e.event_id FROM projections.task_events e
                         WHERE e.tenant_id = t.tenant_id AND e.task_id = t.task_id
                         ORDER BY e.seq DESC LIMIT 3) AS "latest_event_ids!",
                  channel AS "channel: Channel", sensitivity AS "sensitivity: Sensitivity",
                  updated_at,
                  (SELECT e.agent_id FROM public.events e
                    WHERE e.tenant_id = t.tenant_id AND e.seq = t.first_seq) AS owner
             FROM projections.tasks t
            WHERE tenant_id = $1 AND status IN ('open', 'doing')
            ORDER BY last_seq DESC, task_id"#,
        tenant
    )
    .fetch_all(pool)
    .await?;
    for row in &mut tasks {
        keyring.open_in_place(tenant, &mut row.title)?;
        keyring.open_in_place(tenant, &mut row.details)?;
    }
    Ok(tasks
        .into_iter()
        .filter_map(|row| row.into_visible(counter))
        .collect())
}

/// Projections advanced (the tenant's state is stale) or a policy was
/// stored, in any process on the database.
impl Invalidated for ReadCache {
    fn channels(&self) -> &'static [&'static str] {
        &[PROJECTED_CHANNEL, POLICY_CHANNEL]
    }

    fn heard(&self, channel: &str, payload: &str) {
        self.heard_of(channel, payload);
    }

    fn forget_all(&self) {
        self.forget_everything();
    }
}

/// Opens a decision's text and its lists (rationale, constraints,
/// alternatives, consequences), as the decisions projector sealed them.
pub fn open_decision(
    keyring: &Keyring,
    tenant: &str,
    decision: &mut String,
    lists: [&mut Vec<String>; 4],
) -> Result<(), SealError> {
    keyring.open_in_place(tenant, decision)?;
    lists
        .into_iter()
        .try_for_each(|items| keyring.open_all(tenant, items))
}

/// A row of `projections.decisions` as bundles show it.
#[derive(Debug, Clone)]
pub struct DecisionRow {
    pub decision_id: String,
    pub seq: i64,
    pub ts: DateTime<Utc>,
    pub channel: Channel,
    pub sensitivity: Sensitivity,
    pub status: String,
    pub key: Option<String>,
    pub scope: String,
    pub decision: String,
    pub rationale: Vec<String>,
    pub constraints: Vec<String>,
    pub alternatives: Vec<String>,
    pub consequences: Vec<String>,
    pub confidence: Option<f64>,
    pub refs: Vec<String>,
    pub supersedes: Option<String>,
    pub superseded_by: Option<String>,
    /// The agent whose decision it is (its event's), if any.
    pub owner: Option<String>,
}

impl DecisionRow {
    /// Opens the texts a sealed decision keeps sealed.
    pub fn open(&mut self, keyring: &Keyring, tenant: &str) -> Result<(), SealError> {
        open_decision(
            keyring,
            tenant,
            &mut self.decision,
            [
                &mut self.rationale,
                &mut self.constraints,
                &mut self.alternatives,
                &mut self.consequences,
            ],
        )
    }

    pub fn into_visible(self, counter: &TokenCounter) -> Option<Visible> {
        let label = match &self.key {
            Some(key) => format!("decision {key}"),
            None => "decision".to_owned(),
        };
        let meta = render::meta([label.as_str(), &self.scope, &self.status], self.ts);
        let mut text = self.decision.clone();
        for (name, items) in [
            ("Rationale", &self.rationale),
            ("Constraints", &self.constraints),
            ("Alternatives", &self.alternatives),
            ("Consequences", &self.consequences),
        ] {
            if !items.is_empty() {
                text.push_str(&format!("\n{name}: {}", items.join("; ")));
            }
        }
        if let Some(old) = &self.supersedes {
            text.push_str(&format!("\nSupersedes: {old}"));
        }
        if let Some(new) = &self.superseded_by {
            text.push_str(&format!("\nSuperseded by: {new}"));
        }
        let mut refs = vec![self.decision_id.clone()];
        refs.extend(self.refs.iter().cloned());
        let item = Item::counted(
            "decision",
            self.decision_id.clone(),
            meta,
            &text,
            refs,
            counter,
        )?
        .with("decision_id", self.decision_id)
        .with("status", self.status)
        .with("key", self.key)
        .with("scope", self.scope)
        .with("supersedes", self.supersedes)
        .with("superseded_by", self.superseded_by)
        .with("confidence", self.confidence);
        Some(Visible {
            item,
            channel: self.channel,
            sensitivity: self.sensitivity,
            owner: self.owner,
        })
    }
}

#[derive(Debug, Clone)]
struct TaskRow {
    task_id: String,
    status: String,
    title: String,
    details: String,
    refs: Vec<String>,
    /// The task's last three updates, newest first: cited by its item.
    latest_event_ids: Vec<String>,
    channel: Channel,
    sensitivity: Sensitivity,
    updated_at: DateTime<Utc>,
    owner: Option<String>,
}

impl TaskRow {
    fn into_visible(self, counter: &TokenCounter) -> Option<Visible> {
        let meta = render::meta(
            [format!("task {}", self.task_id).as_str(), &self.status],
            self.updated_at,
        );
        let mut text = self.title.clone();
        if !self.details.trim().is_empty() {
            text.push('\n');
            text.push_str(&self.details);
        }
        let mut refs: Vec<String> = self.latest_event_ids.clone();
        refs.extend(self.refs.iter().cloned());
        let item = Item::counted("task", self.task_id.clone(), meta, &text, refs, counter)?
            .with("task_id", self.task_id)
            .with("status", self.status)
            .with("title", self.title);
        Some(Visible {
            item,
            channel: self.channel,
            sensitivity: self.sensitivity,
            owner: self.owner,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some_state() -> Arc<TenantState> {
        Arc::new(TenantState::default())
    }

    #[test]
    fn a_state_read_before_a_rebuild_is_not_kept_after_it() {
        let cache = ReadCache::default();
        let drops = cache.lock().drops;
        // A bundle is reading the state when the rebuild's notice arrives,
        // before any entry was kept.
        cache.heard_of(PROJECTED_CHANNEL, "acme:0");
        cache.hold("acme", 10, &some_state(), drops);
        assert!(!cache.lock().states.contains_key("acme"));

        // Read after the notice, the state is kept.
        let drops = cache.lock().drops;
        cache.hold("acme", 10, &some_state(), drops);
        assert_eq!(cache.lock().states["acme"].through, 10);

        // A bundle that saw the entry at 10 is checking the events up to
        // 12 when a rebuild drops it: what it checked is not put back.
        let drops = cache.lock().drops;
        cache.heard_of(PROJECTED_CHANNEL, "acme:0");
        cache.hold("acme", 12, &some_state(), drops);
        assert!(!cache.lock().states.contains_key("acme"));
    }

    #[test]
    fn a_policy_read_before_a_new_one_is_stored_is_not_kept() {
        let cache = ReadCache::default();
        let drops = cache.lock().drops;
        cache.heard_of(POLICY_CHANNEL, "acme");
        cache.keep_policy("acme", &Arc::new(Policy::default()), drops);
        assert!(!cache.lock().policies.contains_key("acme"));

        let drops = cache.lock().drops;
        cache.keep_policy("acme", &Arc::new(Policy::default()), drops);
        assert!(cache.lock().policies.contains_key("acme"));
    }

    #[test]
    fn common_term_verdicts_serve_the_seq_who_asks_and_the_share_they_were_read_for() {
        let cache = ReadCache::default();
        let private = Visibility::new(Channel::Private);
        let public = Visibility::new(Channel::Public);
        let queries = ["'export'".to_owned(), "'zeppelin'".to_owned()];
        let (kept, drops) = cache.common_terms("acme", 10, private, 100, &queries);
        assert_eq!(kept, [None, None]);
        cache.keep_common("acme", 10, private, 100, [(&queries[0], true)], drops);

        let kept = |through, visibility, share| {
            cache
                .common_terms("acme", through, visibility, share, &queries)
                .0
        };
        assert_eq!(kept(10, private, 100), [Some(true), None]);
        // Another seq, channel, agent or share: not what was read.
        assert_eq!(kept(11, private, 100), [None, None]);
        assert_eq!(kept(10, public, 100), [None, None]);
        assert_eq!(
            kept(10, private.for_agent(Some("coder")), 100),
            [None, None]
        );
        assert_eq!(kept(10, private, 50), [None, None]);
        assert_eq!(
            cache.common_terms("other", 10, private, 100, &queries).0,
            [None, None]
        );

        // Verdicts for a later seq start the tenant's afresh; an earlier
        // seq's do not replace them.
        let drops = cache.lock().drops;
        cache.keep_common("acme", 12, private, 100, [(&queries[1], false)], drops);
        cache.keep_common("acme", 11, private, 100, [(&queries[0], false)], drops);
        assert_eq!(kept(12, private, 100), [None, Some(false)]);
        assert_eq!(kept(10, private, 100), [None, None]);

        // A rebuild drops them, and what was read before it is not kept.
        cache.heard_of(PROJECTED_CHANNEL, "acme:0");
        assert_eq!(kept(12, private, 100), [None, None]);
        cache.keep_common("acme", 12, private, 100, [(&queries[1], true)], drops);
        assert_eq!(kept(12, private, 100), [None, None]);
    }

    #[test]
    fn a_late_notice_of_a_seq_already_kept_drops_nothing() {
        let cache = ReadCache::default();
        let drops = cache.lock().drops;
        cache.hold("acme", 10, &some_state(), drops);
        let private = Visibility::new(Channel::Private);
        let queries = ["'export'".to_owned()];
        cache.keep_common("acme", 10, private, 100, [(&queries[0], true)], drops);
        // The notices of the projections reaching 9, then 10, arrive after
        // a bundle had read the cursors at 10 and kept what it read.
        cache.heard_of(PROJECTED_CHANNEL, "acme:9");
        cache.heard_of(PROJECTED_CHANNEL, "acme:10");
        assert_eq!(cache.lock().drops, drops);
        assert_eq!(cache.lock().states["acme"].through, 10);
        assert_eq!(
            cache.common_terms("acme", 10, private, 100, &queries).0,
            [Some(true)]
        );
    }

    #[test]
    fn projections_moving_on_leave_a_state_being_read_to_be_kept() {
        let cache = ReadCache::default();
        let drops = cache.lock().drops;
        cache.heard_of(PROJECTED_CHANNEL, "acme:11");
        cache.heard_of(PROJECTED_CHANNEL, "other:3");
        cache.hold("acme", 10, &some_state(), drops);
        assert_eq!(cache.lock().states["acme"].through, 10);
    }
}
