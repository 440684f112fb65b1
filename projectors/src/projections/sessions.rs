//! `sessions` and `agents`: who did what where, for listing. A session's
//! row per owner (an agent's private events are that agent's, as
//! everywhere: `owner` is the agent, '' for everything else) keeps its
//! first and last seq and time, its event count, the agents that took part
//! and the kinds recorded; an agent's row keeps its first and last
//! activity and its event count. Folded from every event, so a listing
//! never scans the log.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::projector::{Fold, Table};

use memd_core::event::{ActorType, Channel, Kind, StoredEvent};

const TABLES: &[Table] = &[
    Table {
        name: "sessions",
        key: &["tenant_id", "session_id", "owner"],
    },
    Table {
        name: "agents",
        key: &["tenant_id", "agent_id"],
    },
];

pub struct SessionProjector;

impl Fold for SessionProjector {
    const NAME: &'static str = "sessions";
    const VERSION: i32 = 1;
    const TABLES: &'static [Table] = TABLES;
    const KINDS: &'static [Kind] = Kind::ALL;

    async fn fold<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: Vec<&'a StoredEvent>,
    ) -> Result<(), sqlx::Error> {
        // Summed in memory, each row written once per batch (a rebuild is
        // one batch of thousands of events of a few sessions).
        let mut sessions: BTreeMap<(&str, &str), Activity<'a>> = BTreeMap::new();
        let mut agents: BTreeMap<&str, Activity<'a>> = BTreeMap::new();
        for event in events {
            let agent = agent_of(event);
            sessions
                .entry((event.session_id.as_str(), owner_of(event)))
                .or_insert_with(|| Activity::new(event))
                .add(event, agent);
            if let Some(agent) = agent {
                agents
                    .entry(agent)
                    .or_insert_with(|| Activity::new(event))
                    .add(event, None);
            }
        }
        write_sessions(tx, tenant, sessions).await?;
        write_agents(tx, tenant, agents).await
    }
}

/// The agent an event is activity of: the agent whose memory it is, else
/// its actor when that is an agent.
fn agent_of(event: &StoredEvent) -> Option<&str> {
    event
        .agent_id
        .as_deref()
        .or_else(|| (event.actor_type == ActorType::Agent).then_some(event.actor_id.as_str()))
}

/// Whose a session's events are: an agent's private events its own (no
/// other agent lists them), everything else shared ('').
fn owner_of(event: &StoredEvent) -> &str {
    match &event.agent_id {
        Some(agent) if event.channel == Channel::Private => agent,
        _ => "",
    }
}

/// What a batch adds to one row.
struct Activity<'a> {
    first_seq: i64,
    last_seq: i64,
    first_ts: DateTime<Utc>,
    last_ts: DateTime<Utc>,
    events: i64,
    agents: BTreeSet<&'a str>,
    kinds: BTreeSet<&'a str>,
}

impl<'a> Activity<'a> {
    fn new(event: &StoredEvent) -> Self {
        Self {
            first_seq: event.seq,
            last_seq: event.seq,
            first_ts: event.ts,
            last_ts: event.ts,
            events: 0,
            agents: BTreeSet::new(),
            kinds: BTreeSet::new(),
        }
    }

    fn add(&mut self, event: &'a StoredEvent, agent: Option<&'a str>) {
        self.first_seq = self.first_seq.min(event.seq);
        self.last_seq = self.last_seq.max(event.seq);
        self.first_ts = self.first_ts.min(event.ts);
        self.last_ts = self.last_ts.max(event.ts);
        self.events += 1;
        self.agents.extend(agent);
        self.kinds.insert(event.kind.as_str());
    }
}

/// Arrays of one column per row, as JSON: text[][] must be rectangular.
fn json(items: &BTreeSet<&str>) -> String {
    serde_json::to_string(items).expect("strings serialize")
}

async fn write_sessions(
    tx: &mut PgConnection,
    tenant: &str,
    rows: BTreeMap<(&str, &str), Activity<'_>>,
) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let (mut session, mut owner, mut first_seq, mut last_seq) = (vec![], vec![], vec![], vec![]);
    let (mut first_ts, mut last_ts, mut events, mut agents, mut kinds) =
        (vec![], vec![], vec![], vec![], vec![]);
    for ((id, owned_by), activity) in rows {
        session.push(id);
        owner.push(owned_by);
        first_seq.push(activity.first_seq);
        last_seq.push(activity.last_seq);
        first_ts.push(activity.first_ts);
        last_ts.push(activity.last_ts);
        events.push(activity.events);
        agents.push(json(&activity.agents));
        kinds.push(json(&activity.kinds));
    }
    // Merged into what earlier batches wrote: bounds widened, counts
    // added, sets united (sorted, so a replay writes the same arrays).
    sqlx::query!(
        "INSERT INTO sessions (tenant_id, session_id, owner, first_seq, last_seq, first_ts,
                               last_ts, events, agents, kinds)
         SELECT $1, u.session_id, u.owner, u.first_seq, u.last_seq, u.first_ts, u.last_ts,
                u.events, ARRAY(SELECT jsonb_array_elements_text(u.agents::jsonb)),
                ARRAY(SELECT jsonb_array_elements_text(u.kinds::jsonb))
           FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::timestamptz[],
                       $7::timestamptz[], $8::bigint[], $9::text[], $10::text[])
                AS u (session_id, owner, first_seq, last_seq, first_ts, last_ts, events,
                      agents, kinds)
         ON CONFLICT (tenant_id, session_id, owner) DO UPDATE SET
             first_seq = least(sessions.first_seq, EXCLUDED.first_seq),
             last_seq = greatest(sessions.last_seq, EXCLUDED.last_seq),
             first_ts = least(sessions.first_ts, EXCLUDED.first_ts),
             last_ts = greatest(sessions.last_ts, EXCLUDED.last_ts),
             events = sessions.events + EXCLUDED.events,
             agents = ARRAY(SELECT DISTINCT a FROM unnest(sessions.agents || EXCLUDED.agents) a
                             ORDER BY a),
             kinds = ARRAY(SELECT DISTINCT k FROM unnest(sessions.kinds || EXCLUDED.kinds) k
                            ORDER BY k)",
        tenant,
        &session as &[&str],
        &owner as &[&str],
        &first_seq,
        &last_seq,
        &first_ts,
        &last_ts,
        &events,
        &agents,
        &kinds
    )
    .execute(tx)
    .await?;
    Ok(())
}

async fn write_agents(
    tx: &mut PgConnection,
    tenant: &str,
    rows: BTreeMap<&str, Activity<'_>>,
) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let (mut agent, mut first_seq, mut last_seq) = (vec![], vec![], vec![]);
    let (mut first_ts, mut last_ts, mut events) = (vec![], vec![], vec![]);
    for (id, activity) in rows {
        agent.push(id);
        first_seq.push(activity.first_seq);
        last_seq.push(activity.last_seq);
        first_ts.push(activity.first_ts);
        last_ts.push(activity.last_ts);
        events.push(activity.events);
    }
    sqlx::query!(
        "INSERT INTO agents (tenant_id, agent_id, first_seq, last_seq, first_ts, last_ts, events)
         SELECT $1, u.* FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::timestamptz[],
                                    $6::timestamptz[], $7::bigint[])
                AS u (agent_id, first_seq, last_seq, first_ts, last_ts, events)
         ON CONFLICT (tenant_id, agent_id) DO UPDATE SET
             first_seq = least(agents.first_seq, EXCLUDED.first_seq),
             last_seq = greatest(agents.last_seq, EXCLUDED.last_seq),
             first_ts = least(agents.first_ts, EXCLUDED.first_ts),
             last_ts = greatest(agents.last_ts, EXCLUDED.last_ts),
             events = agents.events + EXCLUDED.events",
        tenant,
        &agent as &[&str],
        &first_seq,
        &last_seq,
        &first_ts,
        &last_ts,
        &events
    )
    .execute(tx)
    .await?;
    Ok(())
}
