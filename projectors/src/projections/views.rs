//! `views`: identity, rules, preferences and other documents a person can
//! read and edit (P6). The latest `view_update` of each view wins, per
//! owner: a private `view_update` of an agent is that agent's own version
//! (`owner`), every other update the shared one (`owner` '').

use std::collections::{BTreeMap, BTreeSet};

use sqlx::PgConnection;

use crate::{
    projector::{Fold, Table},
    retraction::{self, Step},
};

use memd_core::{
    content::{Content, ViewUpdate},
    event::{Channel, Kind, StoredEvent, read_kind_before},
};

const TABLES: &[Table] = &[Table {
    name: "views",
    key: &["tenant_id", "view", "owner"],
}];

pub struct ViewProjector;

impl Fold for ViewProjector {
    const NAME: &'static str = "views";
    /// 2: a view per owner (an agent's private updates are its own).
    const VERSION: i32 = 2;
    const TABLES: &'static [Table] = TABLES;
    const KINDS: &'static [Kind] = &[Kind::ViewUpdate, Kind::Retraction];

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

/// Update events read back per round trip while looking for a view's
/// version before a withdrawn one.
const PAGE: i64 = 256;

/// A view whose shown version a retraction withdraws goes back to the
/// latest earlier update of it (of the same owner) that was not withdrawn
/// too, read back from the log; with none, the view is gone.
async fn withdraw(
    tx: &mut PgConnection,
    tenant: &str,
    retraction: &StoredEvent,
) -> Result<(), sqlx::Error> {
    let shown: Vec<(String, String)> = sqlx::query!(
        "SELECT view, owner FROM views WHERE tenant_id = $1 AND event_id = ANY ($2)",
        tenant,
        &retraction.refs,
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|row| (row.view, row.owner))
    .collect();
    if shown.is_empty() {
        return Ok(());
    }
    let retracted = retraction::retracted_through(&mut *tx, tenant, retraction.seq).await?;
    let mut missing: BTreeSet<(String, String)> = shown.into_iter().collect();
    let mut found = Vec::new();
    let mut before = retraction.seq;
    while !missing.is_empty() {
        let page = read_kind_before(
            &mut *tx,
            &retraction.keyring,
            tenant,
            Kind::ViewUpdate,
            before,
            PAGE,
        )
        .await?;
        let Some(last) = page.last() else { break };
        before = last.seq;
        for event in page {
            if retracted.contains(&event.event_id) {
                continue;
            }
            if let Content::ViewUpdate(ViewUpdate {
                view: Some(view), ..
            }) = event.shape()
                && missing.remove(&(view.to_owned(), owner_of(&event).to_owned()))
            {
                found.push(event);
            }
        }
    }
    for (view, owner) in missing {
        sqlx::query!(
            "DELETE FROM views WHERE tenant_id = $1 AND view = $2 AND owner = $3",
            tenant,
            view,
            owner
        )
        .execute(&mut *tx)
        .await?;
    }
    fold_updates(tx, tenant, found.iter().collect()).await
}

async fn fold_updates(
    tx: &mut PgConnection,
    tenant: &str,
    events: Vec<&StoredEvent>,
) -> Result<(), sqlx::Error> {
    // The latest update of each view in the batch is the only one
    // that shows: write it once (see the tasks projector for why).
    let mut latest: BTreeMap<(&str, &str), (&str, &StoredEvent)> = BTreeMap::new();
    for event in events {
        if let Content::ViewUpdate(ViewUpdate {
            view: Some(view),
            text: Some(text),
        }) = event.shape()
        {
            latest.insert((view, owner_of(event)), (text, event));
        }
    }
    if latest.is_empty() {
        return Ok(());
    }
    let mut view = Vec::new();
    let mut owner = Vec::new();
    let mut text = Vec::new();
    let mut event_id = Vec::new();
    let mut seq = Vec::new();
    let mut ts = Vec::new();
    let mut actor_id = Vec::new();
    let mut channel = Vec::new();
    let mut sensitivity = Vec::new();
    for ((name, owned_by), (body, event)) in latest {
        view.push(name);
        owner.push(owned_by);
        text.push(event.protect(body.to_owned()));
        event_id.push(event.event_id.as_str());
        seq.push(event.seq);
        ts.push(event.ts);
        actor_id.push(event.actor_id.as_str());
        channel.push(event.channel.as_str());
        sensitivity.push(event.sensitivity.as_str());
    }
    sqlx::query!(
        "INSERT INTO views (tenant_id, view, text, event_id, seq, ts, actor_id, channel,
                                sensitivity, owner)
             SELECT $1, u.* FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[],
                                        $6::timestamptz[], $7::text[], $8::text[], $9::text[],
                                        $10::text[])
                    AS u (view, text, event_id, seq, ts, actor_id, channel, sensitivity, owner)
             ON CONFLICT (tenant_id, view, owner) DO UPDATE SET
                 text = EXCLUDED.text, event_id = EXCLUDED.event_id,
                 seq = EXCLUDED.seq, ts = EXCLUDED.ts, actor_id = EXCLUDED.actor_id,
                 channel = EXCLUDED.channel, sensitivity = EXCLUDED.sensitivity",
        tenant,
        &view as &[&str],
        &text,
        &event_id as &[&str],
        &seq,
        &ts,
        &actor_id as &[&str],
        &channel as &[&str],
        &sensitivity as &[&str],
        &owner as &[&str]
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Whose version of a view an update is: an agent's, for its private
/// updates (as every private memory of an agent is its own); the shared
/// version ('') otherwise.
fn owner_of(event: &StoredEvent) -> &str {
    match &event.agent_id {
        Some(agent) if event.channel == Channel::Private => agent,
        _ => "",
    }
}
