//! Retractions as projections fold them.
//!
//! A `retraction` event withdraws the earlier events its `refs` name. The
//! log keeps both; each projection takes what it derived from a withdrawn
//! event out of its rows when it folds the retraction, in log order, so a
//! replay from zero ends with the same rows as the live projection did.
//! Projections that keep a latest state (a view, a task) fold it again
//! from the events that remain, read back from the log.

use std::collections::HashSet;

use sqlx::PgConnection;

use memd_core::event::{Kind, StoredEvent};

/// The event ids `event` withdraws, when it is a retraction.
pub fn withdrawn(event: &StoredEvent) -> Option<&[String]> {
    (event.kind == Kind::Retraction).then_some(event.refs.as_slice())
}

/// One step of folding a batch that holds retractions: a run of other
/// events, folded as usual, or one retraction.
pub enum Step<'a> {
    Fold(Vec<&'a StoredEvent>),
    Withdraw(&'a StoredEvent),
}

/// `events` (in seq order) as runs of other events between retractions:
/// a retraction only names earlier events, so what came before it is
/// folded first, then withdrawn.
pub fn steps<'a>(events: Vec<&'a StoredEvent>) -> Vec<Step<'a>> {
    let mut steps = Vec::new();
    let mut run = Vec::new();
    for event in events {
        if withdrawn(event).is_some() {
            if !run.is_empty() {
                steps.push(Step::Fold(std::mem::take(&mut run)));
            }
            steps.push(Step::Withdraw(event));
        } else {
            run.push(event);
        }
    }
    if !run.is_empty() {
        steps.push(Step::Fold(run));
    }
    steps
}

/// The ids of `tenant`'s events withdrawn by retractions at or below seq
/// `through`: read from the log, so a replay finds the same.
pub async fn retracted_through(
    conn: &mut PgConnection,
    tenant: &str,
    through: i64,
) -> Result<HashSet<String>, sqlx::Error> {
    let ids: Vec<String> = sqlx::query_scalar!(
        "SELECT DISTINCT unnest(refs) AS \"id!\" FROM public.events
          WHERE tenant_id = $1 AND kind = 'retraction' AND seq <= $2",
        tenant,
        through
    )
    .fetch_all(conn)
    .await?;
    Ok(ids.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64, kind: Kind, refs: &[&str]) -> StoredEvent {
        let mut event = StoredEvent::test_message(seq, format!("evt_{seq}"), "x");
        event.kind = kind;
        event.refs = refs.iter().map(|r| (*r).to_owned()).collect();
        event
    }

    #[test]
    fn a_batch_folds_what_precedes_each_retraction_before_withdrawing() {
        let events = [
            event(1, Kind::Message, &[]),
            event(2, Kind::TaskUpdate, &[]),
            event(3, Kind::Retraction, &["evt_2"]),
            event(4, Kind::Message, &[]),
            event(5, Kind::Retraction, &["evt_1"]),
        ];
        let steps = steps(events.iter().collect());
        let shape: Vec<String> = steps
            .iter()
            .map(|step| match step {
                Step::Fold(run) => {
                    format!("fold {:?}", run.iter().map(|e| e.seq).collect::<Vec<_>>())
                }
                Step::Withdraw(retraction) => format!("withdraw {:?}", retraction.refs),
            })
            .collect();
        assert_eq!(
            shape,
            [
                "fold [1, 2]",
                "withdraw [\"evt_2\"]",
                "fold [4]",
                "withdraw [\"evt_1\"]"
            ]
        );
        assert_eq!(withdrawn(&events[0]), None);
    }
}
