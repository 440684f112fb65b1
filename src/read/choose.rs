//! The choose stage of a bundle: down the ranked candidates, best first,
//! what may be shown as evidence, until the bundle's evidence limit or
//! token budget. Decisions go to the ledger instead, superseded, rejected
//! and conflicting memory is left out (and said so), and what another
//! section already shows or a kept item says again collapses into it.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use memd_core::{dedupe, event::Kind};

use memd_projectors::render;
use serde_json::json;

use super::{
    Reader,
    bundle::Item,
    cache::TenantState,
    omissions::{Omissions, details},
    policy::{MAX_CANDIDATE_POOL, Policy, SectionName},
    privacy::Visibility,
    retrieve::{self, Candidate},
};

/// The evidence being chosen, and what it tells the decision ledger.
#[derive(Default)]
pub(super) struct Evidence {
    limit: usize,
    /// No bundle can show more evidence tokens than its budget: choosing
    /// stops there, so a small bundle does little work.
    token_limit: usize,
    /// Word-set similarity from which a candidate repeats a kept one.
    duplicate_similarity: f64,
    /// Whether superseded decisions go to the ledger (the query asks how
    /// decisions changed) rather than being left out.
    with_history: bool,
    /// Decisions in force (and with history, superseded ones) are kept
    /// here like any memory (a search, which has no ledger), rather than
    /// sent to the ledger.
    decisions_kept: bool,
    /// What other sections already show: the recent window's chunks and
    /// the active tasks.
    in_recent_window: foldhash::HashSet<String>,
    active_tasks: HashSet<String>,
    /// The tenant's state the bundle shows: which decisions are active.
    state: Arc<TenantState>,
    tokens: usize,
    /// What was chosen, best first; shown as items by [`Evidence::finish`].
    kept: Vec<Candidate>,
    pub(super) items: Vec<Item>,
    /// Content hashes and word sets of what was kept, for dedupe. A pool
    /// of a thousand near-duplicates looks each of its candidates up here,
    /// so these hash with foldhash, not SipHash, and what was chosen is
    /// known by position (seq, part: unique in a tenant, as its chunk id).
    hashes: foldhash::HashMap<[u8; 32], String>,
    words: Vec<(String, Vec<u64>)>,
    chosen: foldhash::HashSet<(i64, i32)>,
    /// The word set of the candidate being looked at, decoded here rather
    /// than into a new vector for every candidate.
    candidate_words: Vec<u64>,
    pub(super) collapsed: usize,
    /// Decisions the query retrieved, by best rank.
    pub(super) decision_rank: HashMap<String, usize>,
    /// Superseded decisions the query retrieved (shown with history).
    pub(super) history: Vec<String>,
    considered: usize,
}

impl Evidence {
    /// Evidence of at most `limit` items and `token_limit` tokens, beside
    /// the sections that show `in_recent_window` and `active_tasks`.
    pub(super) fn new(
        limit: usize,
        token_limit: usize,
        policy: &Policy,
        with_history: bool,
        in_recent_window: foldhash::HashSet<String>,
        active_tasks: HashSet<String>,
        state: Arc<TenantState>,
    ) -> Self {
        Self {
            limit,
            token_limit,
            duplicate_similarity: policy.duplicate_similarity,
            with_history,
            in_recent_window,
            active_tasks,
            state,
            ..Self::default()
        }
    }

    /// Goes down `ranked` (best first) keeping what may be shown, until the
    /// limit. Decisions go to the ledger, not here. Only decisions' and
    /// summaries' standing is read here (a page at a time), and not that of
    /// decisions the state the ledger shows has active; everything else
    /// is decided from the candidates themselves, near-duplicates by the
    /// word sets stored at projection, so a pool of hundreds of copies of
    /// one fact costs no text reads.
    pub(super) async fn consider(
        &mut self,
        reader: &Reader,
        tenant: &str,
        visibility: Visibility<'_>,
        ranked: Vec<Candidate>,
        omissions: &mut Omissions,
    ) -> Result<(), sqlx::Error> {
        // Pages grow fourfold: a small first page is enough when the best
        // candidates fill the budget, and a pool of near-duplicates costs a
        // few round trips at most.
        const FIRST_PAGE: usize = 64;
        let mut page_size = FIRST_PAGE;
        let mut ranked = ranked.into_iter();
        while !self.full() {
            let page: Vec<Candidate> = ranked.by_ref().take(page_size).collect();
            page_size = (page_size * 4).min(MAX_CANDIDATE_POOL as usize);
            if page.is_empty() {
                break;
            }
            // A decision active in the state the ledger shows stands as
            // that says; the others, and summaries, are read.
            let state = self.state.clone();
            let active = |c: &Candidate| {
                c.kind == Some(Kind::Decision) && state.active_decision_ids.contains(c.event_id())
            };
            let ledgered: Vec<&str> = page
                .iter()
                .filter(|c| matches!(c.kind, Some(Kind::Decision | Kind::Summary)) && !active(c))
                .map(Candidate::event_id)
                .collect();
            let standings = state
                .standings
                .events(&reader.pool, &reader.keyring, tenant, &ledgered)
                .await?;
            let mut task_ids: Vec<String> = page
                .iter()
                .filter_map(updated_task)
                .map(str::to_owned)
                .collect();
            task_ids.sort_unstable();
            task_ids.dedup();
            let tasks = state
                .standings
                .tasks(&reader.pool, tenant, &task_ids)
                .await?;
            for candidate in page {
                if self.full() {
                    break;
                }
                // Keyed by event: every part of a long decision or summary shares it.
                let standing = if active(&candidate) {
                    retrieve::Standing::active()
                } else {
                    standings
                        .get(candidate.event_id())
                        .cloned()
                        .unwrap_or_default()
                        .seen_by(visibility)
                };
                let task = updated_task(&candidate).and_then(|task| tasks.get(task));
                self.take(candidate, standing, task, omissions);
            }
        }
        Ok(())
    }

    /// Keeps decisions in force as evidence (a search has no ledger).
    pub(super) fn keeping_decisions(mut self) -> Self {
        self.decisions_kept = true;
        self
    }

    fn full(&self) -> bool {
        self.kept.len() >= self.limit || self.tokens >= self.token_limit
    }

    /// Whether a decision is left out of the evidence by where it stands:
    /// one in force is shown by the ledger (its rank kept for it there),
    /// a superseded one is history (kept only when asked for) and a
    /// rejected one is gone; each said so in `omissions`. Where decisions
    /// are kept (a search), those in force stay evidence.
    fn leaves_decision(
        &mut self,
        candidate: &Candidate,
        standing: &retrieve::Standing,
        rank: usize,
        omissions: &mut Omissions,
    ) -> bool {
        let section = Some(SectionName::RetrievedEvidence);
        match standing.decision_status.as_deref() {
            Some("active") if self.decisions_kept => false,
            Some("superseded") if self.with_history && self.decisions_kept => false,
            Some("active") => {
                self.decision_rank
                    .entry(candidate.event_id().to_owned())
                    .or_insert(rank);
                true
            }
            Some("superseded") if self.with_history => {
                if !self.decision_rank.contains_key(candidate.event_id()) {
                    self.history.push(candidate.event_id().to_owned());
                }
                self.decision_rank
                    .entry(candidate.event_id().to_owned())
                    .or_insert(rank);
                true
            }
            Some("superseded") => {
                omissions.add(
                    "superseded",
                    section,
                    candidate.chunk_id().to_owned(),
                    details(&[
                        ("decision_id", json!(candidate.event_id())),
                        ("superseded_by", json!(standing.superseded_by)),
                    ]),
                );
                true
            }
            Some(_) => {
                omissions.add(
                    "rejected",
                    section,
                    candidate.chunk_id().to_owned(),
                    details(&[("decision_id", json!(candidate.event_id()))]),
                );
                true
            }
            // Not in the ledger yet (projections lag): plain evidence.
            None => false,
        }
    }

    /// Whether a task update is left out because the task state shows the
    /// task (its update would repeat it), or because a later update replaced
    /// it; said in `omissions`.
    fn task_says_it(
        &self,
        candidate: &Candidate,
        task: Option<&retrieve::TaskNow>,
        omissions: &mut Omissions,
    ) -> bool {
        if candidate.kind == Some(Kind::TaskUpdate)
            && let Some(task) = candidate.source().and_then(|s| s.strip_prefix("task "))
            && self.active_tasks.contains(task)
        {
            omissions.add_keyed(
                "duplicate",
                Some(SectionName::RetrievedEvidence),
                candidate.chunk_id(),
                &format!("kept_in task_state {task}"),
                || details(&[("kept_in", json!("task_state")), ("task_id", json!(task))]),
            );
            return true;
        }
        // An update a later one replaced says how the task stood then, not
        // now: left out, and said so, rather than shown as if current.
        if let (Some(task), Some(task_id)) = (task, updated_task(candidate))
            && task.last_seq > candidate.seq
        {
            omissions.add_keyed(
                "outdated",
                Some(SectionName::RetrievedEvidence),
                candidate.chunk_id(),
                &format!("task {task_id}"),
                || {
                    details(&[
                        ("task_id", json!(task_id)),
                        ("status_now", json!(task.status)),
                        ("updated_at_seq", json!(task.last_seq)),
                    ])
                },
            );
            return true;
        }
        false
    }

    /// Decides what becomes of one candidate.
    fn take(
        &mut self,
        candidate: Candidate,
        standing: retrieve::Standing,
        task: Option<&retrieve::TaskNow>,
        omissions: &mut Omissions,
    ) {
        let section = Some(SectionName::RetrievedEvidence);
        let rank = self.considered;
        self.considered += 1;
        if self.chosen.contains(&(candidate.seq, candidate.part)) {
            return;
        }
        if candidate.kind == Some(Kind::Decision)
            && self.leaves_decision(&candidate, &standing, rank, omissions)
        {
            return;
        }
        if let Some(conflicts) = standing.conflicts {
            omissions.add(
                "conflict",
                section,
                candidate.chunk_id().to_owned(),
                details(&[
                    ("summary_id", json!(candidate.event_id())),
                    ("conflicts", conflicts),
                ]),
            );
            return;
        }
        if self.in_recent_window.contains(candidate.chunk_id()) {
            // Keys with a space never meet a kept chunk's id ([`Evidence::collapse`]).
            omissions.add_keyed(
                "duplicate",
                section,
                candidate.chunk_id(),
                "kept_in recent_window",
                || details(&[("kept_in", json!("recent_window"))]),
            );
            return;
        }
        if self.task_says_it(&candidate, task, omissions) {
            return;
        }
        let content_hash = candidate.content_hash();
        if let Some(kept) = self.hashes.get(&content_hash) {
            collapse(&mut self.collapsed, omissions, candidate.chunk_id(), kept);
            return;
        }
        candidate.words_into(&mut self.candidate_words);
        let words = &self.candidate_words;
        // Where decisions are kept (a search), each stands on its own: a
        // superseded one is not the same fact as its successor, however
        // few words differ ("pages hold 1000 rows" and "... 250 rows").
        let distinct = self.decisions_kept && candidate.kind == Some(Kind::Decision);
        if !distinct
            && let Some((kept, _)) = self
                .words
                .iter()
                .find(|(_, kept)| dedupe::jaccard(kept, words) >= self.duplicate_similarity)
        {
            collapse(&mut self.collapsed, omissions, candidate.chunk_id(), kept);
            return;
        }
        let chunk_id = candidate.chunk_id();
        self.hashes.insert(content_hash, chunk_id.to_owned());
        self.words.push((chunk_id.to_owned(), words.clone()));
        self.chosen.insert((candidate.seq, candidate.part));
        self.tokens += candidate.token_est.max(0) as usize;
        self.kept.push(candidate);
    }

    /// Reads what the kept chunks show (one round trip) and makes them
    /// items, best first.
    pub(super) async fn finish(
        &mut self,
        reader: &Reader,
        tenant: &str,
        omissions: &mut Omissions,
    ) -> Result<(), sqlx::Error> {
        let ids: Vec<&str> = self.kept.iter().map(Candidate::chunk_id).collect();
        let mut shown = retrieve::shown(&reader.pool, &reader.keyring, tenant, &ids).await?;
        for candidate in self.kept.drain(..) {
            // Gone since it was ranked (a rebuild in between): nothing to show.
            let Some(shown) = shown.remove(candidate.chunk_id()) else {
                continue;
            };
            if let Some(artifact) = &shown.artifact_id {
                omissions.add(
                    "truncated_tool_output",
                    Some(SectionName::RetrievedEvidence),
                    candidate.event_id().to_owned(),
                    details(&[("artifact_id", json!(artifact))]),
                );
            }
            let meta = render::chunk_meta(
                &shown.actor_id,
                candidate.kind_name(),
                candidate.source(),
                shown.line_start.zip(shown.line_end),
                candidate.ts,
            );
            self.items.push(Item {
                kind: "evidence",
                id: candidate.chunk_id().to_owned(),
                meta,
                text: render::body(&shown.text),
                tokens: candidate.token_est.max(0) as usize,
                at: Some(candidate.ts),
                refs: vec![
                    candidate.chunk_id().to_owned(),
                    candidate.event_id().to_owned(),
                ],
                fields: details(&[
                    ("chunk_id", json!(candidate.chunk_id())),
                    ("event_id", json!(candidate.event_id())),
                    ("kind", json!(candidate.kind_name())),
                    ("session_id", json!(shown.session_id)),
                    ("ts", json!(candidate.ts)),
                    ("score", json!(round(candidate.score))),
                    ("relevance", json!(round(candidate.relevance))),
                    ("lexical", json!(round(candidate.lexical))),
                    ("semantic", json!(candidate.semantic.map(round))),
                    ("recency", json!(round(candidate.recency))),
                    ("importance", json!(round(f64::from(candidate.importance)))),
                    ("artifact_id", json!(shown.artifact_id)),
                ]),
            });
        }
        Ok(())
    }
}

/// The task a task update chunk is about.
fn updated_task(candidate: &Candidate) -> Option<&str> {
    if candidate.kind != Some(Kind::TaskUpdate) {
        return None;
    }
    candidate.source().and_then(|s| s.strip_prefix("task "))
}

/// A candidate that repeats `kept`, collapsed into it.
fn collapse(collapsed: &mut usize, omissions: &mut Omissions, chunk_id: &str, kept: &str) {
    *collapsed += 1;
    omissions.add_keyed(
        "duplicate",
        Some(SectionName::RetrievedEvidence),
        chunk_id,
        kept,
        || details(&[("kept", json!(kept))]),
    );
}

fn round(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}
