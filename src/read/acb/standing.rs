//! What a bundle shows besides retrieved evidence: views (identity and
//! rules), a receiving agent's packet, tasks, the recent window, and the
//! decision ledger, each as far as the channel and agent may see it.

use std::sync::Arc;

use serde_json::json;

use super::{Context, plan::Plan};
use crate::domain::event::{Channel, Sensitivity};
use crate::read::{
    Reader,
    bundle::{Candidates, Item},
    cache::{DecisionRow, TenantState, Visible},
    choose::Evidence,
    handoff,
    omissions::{Omissions, details},
    policy::SectionName,
    privacy::Visibility,
    recent::{self, RecentReport},
};

/// What the bundle shows besides retrieved evidence and decisions: the
/// tenant's cached state, its views, a receiving agent's packet, the
/// active tasks and the session's recent window.
pub(super) struct Standing {
    pub(super) state: Arc<TenantState>,
    /// Whether the tenant's state came from the cache.
    pub(super) cached: bool,
    /// Identity, rules and the handoff packet.
    pub(super) sections: Vec<Candidates>,
    pub(super) tasks: Vec<Item>,
    pub(super) recent: Vec<Item>,
    pub(super) recent_report: RecentReport,
}

/// What provenance says of the standing sections.
pub(super) struct StandingReport {
    pub(super) cached: bool,
    pub(super) recent_window: RecentReport,
}

impl Standing {
    /// Every section's candidates: these, the decision ledger and the
    /// retrieved evidence.
    pub(super) fn into_sections(
        self,
        decisions: Vec<Item>,
        evidence: Vec<Item>,
    ) -> (Vec<Candidates>, StandingReport) {
        let mut sections = self.sections;
        sections.extend(
            [
                (SectionName::TaskState, self.tasks, false),
                (SectionName::DecisionLedger, decisions, false),
                (SectionName::RetrievedEvidence, evidence, false),
                (SectionName::RecentWindow, self.recent, true),
            ]
            .map(|(name, items, chronological)| Candidates {
                name,
                items,
                chronological,
            }),
        );
        let report = StandingReport {
            cached: self.cached,
            recent_window: self.recent_report,
        };
        (sections, report)
    }
}

/// The standing sections, read once the plan knows the head: a search
/// shows evidence only, so it reads the state alone.
pub(super) async fn standing(
    ctx: &Context<'_>,
    plan: &Plan,
    omissions: &mut Omissions,
) -> Result<Standing, sqlx::Error> {
    let (reader, tenant, visibility) = (ctx.reader, ctx.tenant, ctx.visibility);
    let search = ctx.request.search.is_some();
    let head = &plan.head;
    let handoff = plan.handoff.as_ref();
    let (state, cached) = reader
        .cache
        .state(
            &reader.pool,
            &reader.keyring,
            &reader.counter,
            tenant,
            head.projected_seq,
        )
        .await?;
    // A search shows evidence only: no standing section, and no omission
    // of one.
    let mut sections: Vec<Candidates> = if search {
        Vec::new()
    } else {
        view_sections(&state, visibility, omissions).into()
    };
    if let Some(packet) = handoff
        && let Some(item) = packet.item(&reader.counter)
    {
        sections.push(Candidates {
            name: SectionName::HandoffPacket,
            items: vec![item],
            chronological: false,
        });
    }
    let tasks = if search {
        Vec::new()
    } else {
        task_items(&state, handoff, visibility, omissions)
    };
    let (recent, recent_report) = match &ctx.request.session_id {
        Some(session) => {
            recent::recent_window(
                reader,
                tenant,
                session,
                // The session's history from before its own packet is the
                // sender's; a packet from another session hides nothing.
                handoff
                    .filter(|h| h.session_id == *session)
                    .map_or(0, |h| h.seq),
                ctx.policy,
                visibility,
                (head.projected_seq, head.session_seq),
                omissions,
            )
            .await?
        }
        None => Default::default(),
    };
    let recent = without_stale(reader, tenant, visibility, &state, recent, omissions).await?;
    Ok(Standing {
        state,
        cached,
        sections,
        tasks,
        recent,
        recent_report,
    })
}

/// Identity (the `identity` view) and rules (every other view), as far as
/// the channel may see them.
fn view_sections(
    state: &TenantState,
    visibility: Visibility<'_>,
    omissions: &mut Omissions,
) -> [Candidates; 2] {
    let mut identity = Vec::new();
    let mut rules = Vec::new();
    // Each view once: the requesting agent's own version where it has one
    // (its private `view_update`s), else the shared one. Another agent's
    // version is neither shown nor named.
    let own = |name: &str| {
        visibility.agent.is_some_and(|agent| {
            state
                .views
                .iter()
                .any(|v| v.view == name && v.visible.owner.as_deref() == Some(agent))
        })
    };
    for view in &state.views {
        let shown_version = match (&view.visible.owner, visibility.agent) {
            (Some(owner), Some(agent)) => owner == agent,
            (Some(_), None) => false,
            (None, _) => !own(&view.view),
        };
        if !shown_version {
            continue;
        }
        let is_identity = view.view == "identity";
        if !visibility.allows_view(&view.view, view.visible.sensitivity) {
            let section = if is_identity {
                SectionName::Identity
            } else {
                SectionName::Rules
            };
            omissions.privacy(section, view.visible.item.id.clone());
        } else if is_identity {
            identity.push(view.visible.item.clone());
        } else {
            rules.push(view.visible.item.clone());
        }
    }
    [
        Candidates {
            name: SectionName::Identity,
            items: identity,
            chronological: false,
        },
        Candidates {
            name: SectionName::Rules,
            items: rules,
            chronological: false,
        },
    ]
}

/// The active tasks the channel may see (a receiving agent: its packet's
/// task only).
fn task_items(
    state: &TenantState,
    handoff: Option<&handoff::Handoff>,
    visibility: Visibility<'_>,
    omissions: &mut Omissions,
) -> Vec<Item> {
    let mut tasks = Vec::new();
    for task in &state.tasks {
        if let Some(packet) = handoff
            && packet.task_id.as_deref() != Some(task.item.id.as_str())
        {
            continue;
        }
        if visible(visibility, task) {
            tasks.push(task.item.clone());
        } else if nameable(visibility, task) {
            omissions.privacy(SectionName::TaskState, task.item.id.clone());
        }
    }
    tasks
}

/// The decision ledger's items: a receiving agent's are its packet's;
/// otherwise the active ones, those the query retrieved first (best
/// first), then the newest; with history, superseded ones the query
/// retrieved too.
pub(super) async fn decision_items(
    ctx: &Context<'_>,
    plan: &Plan,
    state: &TenantState,
    evidence: &Evidence,
    omissions: &mut Omissions,
) -> Result<Vec<Item>, sqlx::Error> {
    let (reader, tenant, visibility) = (ctx.reader, ctx.tenant, ctx.visibility);
    let (handoff, history) = (plan.handoff.as_ref(), plan.history);
    let mut decisions: Vec<(usize, i64, Item)> = Vec::new();
    match handoff {
        Some(packet) => {
            for (position, row) in decision_rows(reader, tenant, &packet.decision_ids)
                .await?
                .into_iter()
                .enumerate()
            {
                let seq = row.seq;
                let Some(visible_row) = row.into_visible(&reader.counter) else {
                    continue;
                };
                if visible(visibility, &visible_row) {
                    decisions.push((position, seq, visible_row.item));
                } else if nameable(visibility, &visible_row) {
                    omissions.privacy(SectionName::DecisionLedger, visible_row.item.id);
                }
            }
        }
        None => {
            for decision in &state.decisions {
                if !visible(visibility, &decision.visible) {
                    if nameable(visibility, &decision.visible) {
                        omissions
                            .privacy(SectionName::DecisionLedger, decision.decision_id.clone());
                    }
                    continue;
                }
                let rank = evidence
                    .decision_rank
                    .get(&decision.decision_id)
                    .copied()
                    .unwrap_or(usize::MAX);
                decisions.push((rank, decision.seq, decision.visible.item.clone()));
            }
            if history && !evidence.history.is_empty() {
                for row in decision_rows(reader, tenant, &evidence.history).await? {
                    let rank = evidence
                        .decision_rank
                        .get(&row.decision_id)
                        .copied()
                        .unwrap_or(usize::MAX);
                    let seq = row.seq;
                    if let Some(visible_row) = row.into_visible(&reader.counter)
                        && visible(visibility, &visible_row)
                    {
                        decisions.push((rank, seq, visible_row.item));
                    }
                }
            }
        }
    }
    decisions.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    Ok(decisions.into_iter().map(|(_, _, item)| item).collect())
}

fn visible(visibility: Visibility<'_>, item: &Visible) -> bool {
    visibility.sees(item.channel, item.sensitivity, item.owner.as_deref())
}

/// Whether an item the bundle leaves out may be named in its omissions:
/// another agent's private memory is not even named (its id would tell
/// that it exists), whatever the channel allows.
fn nameable(visibility: Visibility<'_>, item: &Visible) -> bool {
    visibility.owner_allows(item.channel, item.owner.as_deref())
}

async fn decision_rows(
    reader: &Reader,
    tenant: &str,
    ids: &[String],
) -> Result<Vec<DecisionRow>, sqlx::Error> {
    let mut rows = sqlx::query_as!(
        DecisionRow,
        r#"SELECT decision_id, seq, ts, channel AS "channel: Channel",
                  sensitivity AS "sensitivity: Sensitivity", status, key, scope, decision,
                  rationale, constraints, alternatives, consequences, confidence, refs,
                  supersedes, superseded_by,
                  (SELECT e.agent_id FROM public.events e
                    WHERE e.tenant_id = d.tenant_id AND e.seq = d.seq) AS owner
             FROM projections.decisions d WHERE tenant_id = $1 AND decision_id = ANY ($2)"#,
        tenant,
        ids
    )
    .fetch_all(&reader.pool)
    .await?;
    for row in &mut rows {
        row.open(&reader.keyring, tenant)?;
    }
    rows.sort_by_key(|row| ids.iter().position(|id| *id == row.decision_id));
    Ok(rows)
}

/// The window without decisions and summaries that no longer stand: a
/// superseded or rejected decision, a summary that contradicts the ledger.
/// Shown as plain turns, the model would take them for what holds now; each
/// is left out with an omission naming why (the ledger shows what does).
/// Decisions the ledger holds active are known from `state`; the others
/// cost one statement, only when the window holds any.
async fn without_stale(
    reader: &Reader,
    tenant: &str,
    visibility: Visibility<'_>,
    state: &TenantState,
    items: Vec<Item>,
    omissions: &mut Omissions,
) -> Result<Vec<Item>, sqlx::Error> {
    let kind = |item: &Item| {
        item.fields
            .get("kind")
            .and_then(|k| k.as_str())
            .map(str::to_owned)
    };
    let event_id = |item: &Item| {
        item.fields
            .get("event_id")
            .and_then(|e| e.as_str())
            .map(str::to_owned)
    };
    let section = Some(SectionName::RecentWindow);
    let items: Vec<Item> = match state.retracted.is_empty() {
        true => items,
        false => items
            .into_iter()
            .filter(|item| match event_id(item) {
                Some(id) if state.retracted.contains(&id) => {
                    omissions.add(
                        "retracted",
                        section,
                        item.id.clone(),
                        details(&[("event_id", json!(id))]),
                    );
                    false
                }
                _ => true,
            })
            .collect(),
    };
    let asked: Vec<String> = items
        .iter()
        .filter(|item| matches!(kind(item).as_deref(), Some("decision" | "summary")))
        .filter_map(event_id)
        .filter(|id| !state.active_decision_ids.contains(id))
        .collect();
    if asked.is_empty() {
        return Ok(items);
    }
    let asked: Vec<&str> = asked.iter().map(String::as_str).collect();
    let standings = state
        .standings
        .events(&reader.pool, &reader.keyring, tenant, &asked)
        .await?;
    let mut kept = Vec::with_capacity(items.len());
    for item in items {
        let standing = event_id(&item)
            .and_then(|id| Some((id.clone(), standings.get(&id)?.clone().seen_by(visibility))));
        let Some((id, standing)) = standing else {
            kept.push(item);
            continue;
        };
        match (standing.decision_status.as_deref(), standing.conflicts) {
            (Some("superseded"), _) => omissions.add(
                "superseded",
                section,
                item.id.clone(),
                details(&[
                    ("decision_id", json!(id)),
                    ("superseded_by", json!(standing.superseded_by)),
                ]),
            ),
            (Some("rejected"), _) => omissions.add(
                "rejected",
                section,
                item.id.clone(),
                details(&[("decision_id", json!(id))]),
            ),
            (_, Some(conflicts)) => omissions.add(
                "conflict",
                section,
                item.id.clone(),
                details(&[("summary_id", json!(id)), ("conflicts", conflicts)]),
            ),
            _ => kept.push(item),
        }
    }
    Ok(kept)
}
