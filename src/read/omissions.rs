//! What a bundle leaves out, and why: omissions merged by reason, section
//! and details, with up to [`OMISSION_IDS_SHOWN`] ids each. Every stage
//! that leaves something out adds to them; none of them imports the bundle.

use serde::Serialize;
use serde_json::{Map, Value};

use super::{bundle::Left, policy::SectionName};

/// Something left out, and why: `budget`, `privacy`, `retention`,
/// `retracted`, `duplicate`, `superseded`, `rejected`, `conflict`, or
/// `truncated_tool_output` (the
/// item is in, but its full output is only in the artifact).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Omission {
    pub reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<SectionName>)]
    pub section: Option<&'static str>,
    /// The ids left out, at most 100.
    pub candidates: Vec<String>,
    /// How many were left out.
    pub count: usize,
    /// By reason: `kept` or `kept_in` (duplicate), `decision_id` and
    /// `superseded_by` (superseded), `conflicts` (conflict), ...
    #[serde(flatten)]
    pub details: Map<String, Value>,
}

/// Ids listed per omission; `count` says how many there were.
pub(super) const OMISSION_IDS_SHOWN: usize = 100;

/// Omissions, merged by reason, section and details.
#[derive(Default)]
pub(super) struct Omissions {
    list: Vec<Omission>,
    /// By reason and section, then by what tells the details apart: looked
    /// up without building a key, as a pool of near-duplicates looks up the
    /// same few omissions a thousand times.
    index: foldhash::HashMap<(&'static str, Option<SectionName>), foldhash::HashMap<String, usize>>,
}

impl Omissions {
    pub(super) fn add(
        &mut self,
        reason: &'static str,
        section: Option<SectionName>,
        id: String,
        details: Map<String, Value>,
    ) {
        let key = serde_json::to_string(&details).unwrap_or_default();
        if let Some(listed) = self.counted(reason, section, &key, || details) {
            listed.push(id);
        }
    }

    /// [`Omissions::add`] for callers that know what tells their details
    /// apart (`key`): the details are built only for a new omission, and
    /// the id copied only while the omission still lists ids. A bundle may
    /// collapse a thousand near-duplicates into a few kept items.
    pub(super) fn add_keyed(
        &mut self,
        reason: &'static str,
        section: Option<SectionName>,
        id: &str,
        key: &str,
        details: impl FnOnce() -> Map<String, Value>,
    ) {
        if let Some(listed) = self.counted(reason, section, key, details) {
            listed.push(id.to_owned());
        }
    }

    /// Counts one more id left out for `reason` in `section` with the
    /// details `key` tells apart, and gives the ids listed when there is
    /// room for it.
    fn counted(
        &mut self,
        reason: &'static str,
        section: Option<SectionName>,
        key: &str,
        details: impl FnOnce() -> Map<String, Value>,
    ) -> Option<&mut Vec<String>> {
        let index = self.index.entry((reason, section)).or_default();
        let at = match index.get(key) {
            Some(at) => *at,
            None => {
                self.list.push(Omission {
                    reason,
                    section: section.map(SectionName::as_str),
                    candidates: Vec::new(),
                    count: 0,
                    details: details(),
                });
                index.insert(key.to_owned(), self.list.len() - 1);
                self.list.len() - 1
            }
        };
        let omission = &mut self.list[at];
        omission.count += 1;
        (omission.candidates.len() < OMISSION_IDS_SHOWN).then_some(&mut omission.candidates)
    }

    pub(super) fn privacy(&mut self, section: SectionName, id: String) {
        self.add("privacy", Some(section), id, Map::new());
    }

    /// Retrieval found nothing that shares a word or a meaning with the
    /// question: the evidence is empty on purpose, and `details` say why
    /// (how many candidates were unrelated, the floor, the best of them).
    pub(super) fn nothing_relevant(&mut self, details: Map<String, Value>) {
        self.list.push(Omission {
            reason: "nothing_relevant",
            section: Some(SectionName::RetrievedEvidence.as_str()),
            candidates: Vec::new(),
            count: 0,
            details,
        });
    }
}

pub(super) fn details(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}
impl Omissions {
    /// What did not fit the budget, per section.
    pub(super) fn budget(&mut self, left: Vec<Left>) {
        for left in left {
            for id in left.ids {
                self.add("budget", Some(left.section), id, Map::new());
            }
        }
    }

    pub(super) fn into_list(self) -> Vec<Omission> {
        self.list
    }
}
