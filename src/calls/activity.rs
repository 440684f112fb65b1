//! Who did what where: the tenant's sessions and agents as the sessions
//! projection folds them, with agent isolation (an agent lists the shared
//! part of each session and its own, and only itself among agents).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{ApiState, error::CallError, page_limit, require_scope};
use crate::{domain::tenant::Scope, tenants::Caller};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1_000;

/// `GET /api/v1/sessions`: filters and paging.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SessionQuery {
    /// Only sessions this agent took part in.
    pub agent_id: Option<String>,
    /// Only sessions active at or after this time (their last event's
    /// `ts`), RFC 3339.
    pub since: Option<DateTime<Utc>>,
    /// Only sessions active before this time (their first event's `ts`).
    pub until: Option<DateTime<Utc>>,
    /// Only sessions whose last event is before this seq: pass
    /// `next_before_seq` for the next (older) page.
    pub before_seq: Option<i64>,
    /// At most this many, most recently active first.
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
}

/// One session, as the caller may see it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Session {
    pub session_id: String,
    /// Its first and last events, by seq and by `ts`.
    pub first_seq: i64,
    pub last_seq: i64,
    pub first_ts: DateTime<Utc>,
    pub last_ts: DateTime<Utc>,
    /// Its events (all kinds, retractions included).
    pub events: i64,
    /// The agents that took part: an event's `agent_id`, else its actor
    /// when an agent. Sorted.
    pub agents: Vec<String>,
    /// The kinds recorded in it. Sorted.
    pub kinds: Vec<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SessionPage {
    /// Most recently active first.
    pub sessions: Vec<Session>,
    /// The `before_seq` of the next (older) page; null once a page comes
    /// back short.
    #[schema(required = true)]
    pub next_before_seq: Option<i64>,
}

/// The caller's sessions, most recently active first.
pub(crate) async fn list_sessions(
    state: &ApiState,
    caller: &Caller,
    query: &SessionQuery,
) -> Result<SessionPage, CallError> {
    require_scope(caller, Scope::Read)?;
    let limit = page_limit(query.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let sessions: Vec<Session> = state
        .read_log(|pool| async move {
            Ok(sqlx::query_as!(
                Session,
                r#"WITH visible AS (
                       SELECT * FROM projections.sessions
                        WHERE tenant_id = $1 AND ($2::text IS NULL OR owner IN ('', $2))),
                   grouped AS (
                       SELECT session_id, min(first_seq) AS first_seq, max(last_seq) AS last_seq,
                              min(first_ts) AS first_ts, max(last_ts) AS last_ts,
                              sum(events)::bigint AS events
                         FROM visible GROUP BY session_id)
                   SELECT g.session_id AS "session_id!", g.first_seq AS "first_seq!",
                          g.last_seq AS "last_seq!", g.first_ts AS "first_ts!",
                          g.last_ts AS "last_ts!", g.events AS "events!",
                          ARRAY(SELECT DISTINCT a FROM visible v, unnest(v.agents) a
                                 WHERE v.session_id = g.session_id ORDER BY a) AS "agents!",
                          ARRAY(SELECT DISTINCT k FROM visible v, unnest(v.kinds) k
                                 WHERE v.session_id = g.session_id ORDER BY k) AS "kinds!"
                     FROM grouped g
                    WHERE ($3::bigint IS NULL OR g.last_seq < $3)
                      AND ($4::timestamptz IS NULL OR g.last_ts >= $4)
                      AND ($5::timestamptz IS NULL OR g.first_ts < $5)
                      AND ($6::text IS NULL OR EXISTS (
                           SELECT FROM visible v
                            WHERE v.session_id = g.session_id AND $6 = ANY (v.agents)))
                    ORDER BY g.last_seq DESC LIMIT $7"#,
                caller.tenant.as_str(),
                caller.agent,
                query.before_seq,
                query.since,
                query.until,
                query.agent_id,
                limit
            )
            .fetch_all(pool)
            .await?)
        })
        .await?;
    let next_before_seq = (sessions.len() as i64 == limit)
        .then(|| sessions.last().map(|s| s.last_seq))
        .flatten();
    Ok(SessionPage {
        sessions,
        next_before_seq,
    })
}

/// `GET /api/v1/agents`: paging.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AgentQuery {
    /// Only agents whose id sorts after this one: pass `next_after` for
    /// the next page.
    pub after: Option<String>,
    /// At most this many, by id.
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
}

/// One agent: its activity in the log and its tokens.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Agent {
    pub agent_id: String,
    /// Its first and last events (null before it recorded any), by seq
    /// and by `ts`.
    #[schema(required = true)]
    pub first_seq: Option<i64>,
    #[schema(required = true)]
    pub last_seq: Option<i64>,
    #[schema(required = true)]
    pub first_ts: Option<DateTime<Utc>>,
    #[schema(required = true)]
    pub last_ts: Option<DateTime<Utc>>,
    /// Events that are its memory (`agent_id`) or that it recorded as
    /// their actor.
    pub events: i64,
    /// Tokens issued bound to it (`memd tenant token --agent`), and those
    /// not revoked.
    pub tokens_issued: i64,
    pub tokens_active: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentPage {
    /// By id.
    pub agents: Vec<Agent>,
    /// The `after` of the next page; null once a page comes back short.
    #[schema(required = true)]
    pub next_after: Option<String>,
}

/// The tenant's agents (an agent's token: itself alone): those with
/// activity in the log and those with tokens, by id.
pub(crate) async fn list_agents(
    state: &ApiState,
    caller: &Caller,
    query: &AgentQuery,
) -> Result<AgentPage, CallError> {
    require_scope(caller, Scope::Read)?;
    let limit = page_limit(query.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    // Tokens live on the primary alone: read it.
    let agents = sqlx::query_as!(
        Agent,
        r#"WITH known AS (
               SELECT agent_id FROM projections.agents WHERE tenant_id = $1
               UNION
               SELECT agent_id FROM public.api_tokens
                WHERE tenant_id = $1 AND agent_id IS NOT NULL)
           SELECT k.agent_id AS "agent_id!", a.first_seq AS "first_seq?", a.last_seq AS "last_seq?",
                  a.first_ts AS "first_ts?", a.last_ts AS "last_ts?",
                  coalesce(a.events, 0) AS "events!",
                  (SELECT count(*) FROM public.api_tokens t
                    WHERE t.tenant_id = $1 AND t.agent_id = k.agent_id) AS "tokens_issued!",
                  (SELECT count(*) FROM public.api_tokens t
                    WHERE t.tenant_id = $1 AND t.agent_id = k.agent_id
                      AND t.revoked_at IS NULL) AS "tokens_active!"
             FROM known k
             LEFT JOIN projections.agents a ON a.tenant_id = $1 AND a.agent_id = k.agent_id
            WHERE ($2::text IS NULL OR k.agent_id = $2) AND ($3::text IS NULL OR k.agent_id > $3)
            ORDER BY k.agent_id LIMIT $4"#,
        caller.tenant.as_str(),
        caller.agent,
        query.after,
        limit
    )
    .fetch_all(&state.pool)
    .await?;
    let next_after = (agents.len() as i64 == limit)
        .then(|| agents.last().map(|a| a.agent_id.clone()))
        .flatten();
    Ok(AgentPage { agents, next_after })
}
