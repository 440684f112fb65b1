//! Packing ranked items into sections under a token budget, and rendering
//! the result. Every count here is exact: an item's tokens are its handle's
//! plus its stored meta-and-body count, a section adds its heading and the
//! heading of each day its dated items happened on, and the blocks are
//! built so that counts add up (see `memd_projectors::render`).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, NaiveDate, Utc};

use memd_projectors::{projections::TokenCounter, render};
use serde::Serialize;
use serde_json::{Map, Value};

use super::policy::{Policy, SectionName};

/// Something a section may hold, rendered and counted.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Item {
    /// `view`, `task`, `decision`, `evidence`, `message`, `handoff`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// What omissions name it by: a chunk, decision, task or handoff id, or
    /// `view:<name>`.
    #[serde(skip)]
    pub id: String,
    #[serde(skip)]
    pub meta: String,
    /// The body as rendered (no leading line breaks, one closing newline).
    pub text: String,
    /// Tokens of `meta` + `text`, without the handle.
    #[serde(skip)]
    pub tokens: usize,
    /// When it happened, for an item shown under the heading of its day
    /// (what was said or run); its `meta` then gives the time of day only.
    /// `None`: `meta` carries its own date.
    #[serde(skip)]
    pub at: Option<DateTime<Utc>>,
    /// What it cites: chunk ids, event ids, `view:<name>`.
    pub refs: Vec<String>,
    /// Kind-specific fields (`chunk_id`, `decision_id`, `status`, `score`, ...).
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl Item {
    /// An item whose meta line and body are counted now.
    pub fn counted(
        kind: &'static str,
        id: String,
        meta: String,
        text: &str,
        refs: Vec<String>,
        counter: &TokenCounter,
    ) -> Option<Self> {
        let text = render::body(text);
        if text.is_empty() {
            return None;
        }
        let tokens = counter.count(&meta) + counter.count(&text);
        Some(Self {
            kind,
            id,
            meta,
            text,
            tokens,
            at: None,
            refs,
            fields: Map::new(),
        })
    }

    pub fn with(mut self, field: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(field.to_owned(), value.into());
        self
    }
}

/// A packed section, as the response shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Section {
    #[schema(value_type = SectionName)]
    pub name: &'static str,
    pub items: Vec<PackedItem>,
    pub token_est: usize,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PackedItem {
    /// What to cite it by, unique in the bundle: a section letter and a
    /// number (`V` views, `H` handoff, `T` tasks, `D` decisions, `E`
    /// evidence, `R` recent window), e.g. `E3`.
    pub handle: String,
    #[serde(flatten)]
    pub item: Item,
}

/// Token counts of the fixed pieces of a prompt, computed once per encoding.
pub struct Costs {
    headings: BTreeMap<SectionName, usize>,
    /// `handles[prefix][n]`: tokens of `[Xn]`.
    handles: BTreeMap<char, Vec<usize>>,
    /// `most[prefix][n]`: the most tokens any of `[X1]` .. `[Xn]` takes.
    most: BTreeMap<char, Vec<usize>>,
    /// Counts day headings (one per day a bundle shows, too many dates to
    /// count ahead).
    counter: TokenCounter,
}

/// Handles are numbered up to this (no section can hold more items).
const MAX_HANDLE: usize = 1_024;

impl Costs {
    pub fn new(counter: &TokenCounter) -> Self {
        let headings = SectionName::ALL
            .iter()
            .map(|name| (*name, counter.count(&render::heading(name.as_str()))))
            .collect();
        let handles: BTreeMap<char, Vec<usize>> = SectionName::ALL
            .iter()
            .map(|name| name.handle_prefix())
            .map(|prefix| {
                let counts = (0..=MAX_HANDLE)
                    .map(|n| counter.count(&render::handle(prefix, n)))
                    .collect();
                (prefix, counts)
            })
            .collect();
        let most = handles
            .iter()
            .map(|(prefix, counts): (&char, &Vec<usize>)| {
                let mut max = 0;
                let running = counts
                    .iter()
                    .map(|count| {
                        max = max.max(*count);
                        max
                    })
                    .collect();
                (*prefix, running)
            })
            .collect();
        Self {
            headings,
            handles,
            most,
            counter: *counter,
        }
    }

    fn day(&self, date: NaiveDate) -> usize {
        self.counter.count(&render::day(date))
    }

    fn heading(&self, name: SectionName) -> usize {
        self.headings[&name]
    }

    fn handle(&self, prefix: char, n: usize) -> usize {
        self.handles[&prefix][n.min(MAX_HANDLE)]
    }

    fn most_handle(&self, prefix: char, n: usize) -> usize {
        self.most[&prefix][n.min(MAX_HANDLE)]
    }
}

/// A section's ranked candidates, best first, and how they are shown.
pub struct Candidates {
    pub name: SectionName,
    pub items: Vec<Item>,
    /// Show in reverse order of rank (the recent window: ranked newest
    /// first, shown oldest first).
    pub chronological: bool,
}

/// What did not fit, per section.
pub struct Left {
    pub section: SectionName,
    pub ids: Vec<String>,
}

/// Fills sections in priority order under `max_tokens`, renders them, and
/// returns the sections, the exact token total and what did not fit.
///
/// Caps are the policy's, scaled to `max_tokens` (a 2,000-token bundle gets
/// 2,000/65,000 of each), and so is the reserve, which is never filled.
/// What the sections leave unused goes, in a second pass and again by
/// priority, to sections with items still waiting: a small bundle of one
/// busy section is not left mostly empty.
pub fn pack(
    policy: &Policy,
    max_tokens: usize,
    costs: &Costs,
    mut candidates: Vec<Candidates>,
) -> (Vec<Section>, usize, Vec<Left>) {
    let total: u64 = SectionName::ALL
        .iter()
        .map(|name| u64::from(policy.sections.get(*name).cap))
        .sum::<u64>()
        + u64::from(policy.reserve);
    let scaled = |cap: u32| -> usize {
        (u64::from(cap) * max_tokens as u64)
            .checked_div(total)
            .unwrap_or(0) as usize
    };
    let budgets: BTreeMap<SectionName, usize> = SectionName::ALL
        .iter()
        .map(|name| (*name, scaled(policy.sections.get(*name).cap)))
        .collect();
    // The reserve is never filled; rounding the caps down leaves its
    // remainder to the sections.
    let usable = max_tokens - scaled(policy.reserve).min(max_tokens);
    // Priority order, ties in rendering order.
    candidates.sort_by_key(|c| {
        (
            std::cmp::Reverse(policy.sections.get(c.name).priority),
            c.name,
        )
    });

    // Chosen item indexes per section, and the worst-case handle cost paid.
    let mut chosen: BTreeMap<SectionName, Vec<usize>> = BTreeMap::new();
    // The days whose heading a section already pays for.
    let mut days: BTreeMap<SectionName, BTreeSet<NaiveDate>> = BTreeMap::new();
    let mut used: BTreeMap<SectionName, usize> = BTreeMap::new();
    let mut spent = 0;
    for pass in 0..2 {
        for section in &candidates {
            let picked = chosen.entry(section.name).or_default();
            let section_days = days.entry(section.name).or_default();
            let mut section_used = used.get(&section.name).copied().unwrap_or(0);
            let limit = if pass == 0 {
                budgets[&section.name]
            } else {
                section_used + usable.saturating_sub(spent)
            };
            let prefix = section.name.handle_prefix();
            // No section shows more items than it has handles for.
            for (index, item) in section.items.iter().enumerate().take(MAX_HANDLE) {
                if picked.contains(&index) {
                    continue;
                }
                // Handles are numbered once the section is final; budget
                // for the largest number it can reach.
                let new_day = item
                    .at
                    .map(|at| at.date_naive())
                    .filter(|day| !section_days.contains(day));
                let cost = item.tokens
                    + costs.most_handle(prefix, section.items.len())
                    + if picked.is_empty() {
                        costs.heading(section.name)
                    } else {
                        0
                    }
                    + new_day.map_or(0, |day| costs.day(day));
                if section_used + cost <= limit && spent + cost <= usable {
                    picked.push(index);
                    section_days.extend(new_day);
                    section_used += cost;
                    spent += cost;
                }
            }
            used.insert(section.name, section_used);
        }
    }

    candidates.sort_by_key(|c| c.name);
    assemble(costs, candidates, chosen)
}

/// The sections in rendering order, each with the items `chosen` for it
/// (indexes into its candidates) numbered in its order, the exact token
/// total, and what was left.
fn assemble(
    costs: &Costs,
    candidates: Vec<Candidates>,
    mut chosen: BTreeMap<SectionName, Vec<usize>>,
) -> (Vec<Section>, usize, Vec<Left>) {
    let mut sections = Vec::new();
    let mut left = Vec::new();
    let mut tokens = 0;
    for section in candidates {
        let mut picked = chosen.remove(&section.name).unwrap_or_default();
        picked.sort_unstable();
        let mut taken = vec![false; section.items.len()];
        for index in &picked {
            taken[*index] = true;
        }
        let mut items: Vec<Item> = Vec::with_capacity(picked.len());
        let mut missed = Vec::new();
        for (item, taken) in section.items.into_iter().zip(taken) {
            if taken {
                items.push(item);
            } else {
                missed.push(item.id);
            }
        }
        if !missed.is_empty() {
            left.push(Left {
                section: section.name,
                ids: missed,
            });
        }
        if items.is_empty() {
            continue;
        }
        if section.chronological {
            items.reverse();
        }
        let section = numbered(costs, section.name, items);
        tokens += section.token_est;
        sections.push(section);
    }
    (sections, tokens, left)
}

/// A section of `items` in the order shown, each with its handle, and its
/// exact token count.
fn numbered(costs: &Costs, name: SectionName, items: Vec<Item>) -> Section {
    let prefix = name.handle_prefix();
    let days: BTreeSet<NaiveDate> = items
        .iter()
        .filter_map(|item| item.at)
        .map(|at| at.date_naive())
        .collect();
    let mut token_est =
        costs.heading(name) + days.into_iter().map(|day| costs.day(day)).sum::<usize>();
    let items = items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            token_est += costs.handle(prefix, index + 1) + item.tokens;
            PackedItem {
                handle: format!("{prefix}{}", index + 1),
                item,
            }
        })
        .collect();
    Section {
        name: name.as_str(),
        items,
        token_est,
    }
}

/// Every item of `candidates`, numbered and counted as [`pack`] does, with
/// no budget: a search's results.
pub fn unbudgeted(costs: &Costs, candidates: Vec<Candidates>) -> (Vec<Section>, usize, Vec<Left>) {
    let sections: Vec<Section> = candidates
        .into_iter()
        .filter(|section| !section.items.is_empty())
        .map(|section| {
            let items = section.items.into_iter().take(MAX_HANDLE).collect();
            numbered(costs, section.name, items)
        })
        .collect();
    let tokens = sections.iter().map(|s| s.token_est).sum();
    (sections, tokens, Vec::new())
}

/// The bundle as one prompt string: each section's heading, then each
/// item's handle, meta line and body. Dated items follow, in the order they
/// happened, under the heading of their day: a timeline, whatever order the
/// section ranks them in (their handles keep that order). Its token count
/// is the bundle's `token_used_est`, exactly.
pub fn render(sections: &[Section]) -> String {
    let mut prompt = String::new();
    for section in sections {
        prompt.push_str(&render::heading(section.name));
        let mut shown: Vec<&PackedItem> = section.items.iter().collect();
        // Stable: undated items first, in rank order; items of one moment
        // (the parts of an event) keep theirs.
        shown.sort_by_key(|packed| packed.item.at);
        let mut day = None;
        for packed in shown {
            if let Some(at) = packed.item.at
                && day != Some(at.date_naive())
            {
                day = Some(at.date_naive());
                prompt.push_str(&render::day(at.date_naive()));
            }
            prompt.push('[');
            prompt.push_str(&packed.handle);
            prompt.push(']');
            prompt.push_str(&packed.item.meta);
            prompt.push_str(&packed.item.text);
        }
    }
    prompt
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;
    use memd_projectors::projections::Encoding;
    use proptest::prelude::*;

    use super::*;
    use crate::read::policy::SectionPolicy;

    fn text() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just("\n".to_owned()),
                Just("/".to_owned()),
                Just(" ".to_owned()),
                "[.,;:!?#*()\\[\\]\"'-]{1,3}",
                "[0-9]{1,4}",
                "[a-zA-Z]{1,9}",
                "[éЖ中🙂]{1,2}",
            ],
            0..60,
        )
        .prop_map(|parts| parts.concat())
    }

    /// Sections of items: who, what, and when for an item shown under its
    /// day (a few days apart at most, so days are shared).
    #[allow(clippy::type_complexity)]
    fn sections() -> impl Strategy<Value = Vec<(SectionName, Vec<(String, String, Option<i64>)>)>> {
        proptest::collection::vec(
            (
                proptest::sample::select(SectionName::ALL.to_vec()),
                proptest::collection::vec(
                    (
                        text(),
                        text(),
                        proptest::option::of(1_700_000_000i64..1_700_400_000),
                    ),
                    0..12,
                ),
            ),
            0..7,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Whatever the content, caps, priorities and budget: the rendered
        /// bundle counts exactly `token_used_est` tokens, never more than
        /// `max_tokens`, and every candidate is either packed or reported.
        #[test]
        fn a_bundle_never_exceeds_its_budget(
            contents in sections(),
            caps in proptest::collection::vec((0u32..30_000, 0u8..12), 7),
            reserve in 0u32..10_000,
            max_tokens in 1usize..4_000,
            cl100k in any::<bool>(),
        ) {
            let counter = TokenCounter::new(if cl100k { Encoding::Cl100kBase } else { Encoding::O200kBase });
            let costs = Costs::new(&counter);
            let mut policy = Policy { reserve, ..Policy::default() };
            for (name, (cap, priority)) in SectionName::ALL.iter().zip(caps) {
                let section = SectionPolicy { cap, priority };
                match name {
                    SectionName::Identity => policy.sections.identity = section,
                    SectionName::Rules => policy.sections.rules = section,
                    SectionName::HandoffPacket => policy.sections.handoff_packet = section,
                    SectionName::TaskState => policy.sections.task_state = section,
                    SectionName::DecisionLedger => policy.sections.decision_ledger = section,
                    SectionName::RetrievedEvidence => policy.sections.retrieved_evidence = section,
                    SectionName::RecentWindow => policy.sections.recent_window = section,
                }
            }
            let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
            let mut seen = std::collections::BTreeSet::new();
            let mut total = 0;
            let candidates: Vec<Candidates> = contents
                .into_iter()
                .filter(|(name, _)| seen.insert(*name))
                .map(|(name, items)| Candidates {
                    name,
                    chronological: name == SectionName::RecentWindow,
                    items: items
                        .into_iter()
                        .enumerate()
                        .filter_map(|(i, (who, text, when))| {
                            let id = format!("{}-{i}", name.as_str());
                            match when.and_then(|secs| DateTime::from_timestamp(secs, 0)) {
                                Some(when) => Item::counted(
                                    "evidence",
                                    id,
                                    render::meta_of_day([who.as_str()], when),
                                    &text,
                                    vec![],
                                    &counter,
                                )
                                .map(|item| Item { at: Some(when), ..item }),
                                None => Item::counted(
                                    "evidence",
                                    id,
                                    render::meta([who.as_str()], at),
                                    &text,
                                    vec![],
                                    &counter,
                                ),
                            }
                        })
                        .inspect(|_| total += 1)
                        .collect(),
                })
                .collect();
            let (sections, tokens, left) = pack(&policy, max_tokens, &costs, candidates);
            let prompt = render(&sections);
            prop_assert_eq!(counter.count(&prompt), tokens, "{:?}", prompt);
            prop_assert!(tokens <= max_tokens, "{} > {}", tokens, max_tokens);
            let packed: usize = sections.iter().map(|s| s.items.len()).sum();
            let reported: usize = left.iter().map(|l| l.ids.len()).sum();
            prop_assert_eq!(packed + reported, total);
            let sum: usize = sections.iter().map(|s| s.token_est).sum();
            prop_assert_eq!(sum, tokens);
        }
    }

    /// Packs `items` as the only section, the evidence, with the default
    /// policy into 2,000 tokens.
    fn pack_evidence(costs: &Costs, items: Vec<Item>) -> (Vec<Section>, usize, Vec<Left>) {
        pack(
            &Policy::default(),
            2_000,
            costs,
            vec![Candidates {
                name: SectionName::RetrievedEvidence,
                items,
                chronological: false,
            }],
        )
    }

    fn said(counter: &TokenCounter, id: &str, at: &str, text: &str) -> Item {
        let at: DateTime<Utc> = at.parse().unwrap();
        let meta = render::meta_of_day(["alice"], at);
        let item = Item::counted("evidence", id.to_owned(), meta, text, vec![], counter).unwrap();
        Item {
            at: Some(at),
            ..item
        }
    }

    #[test]
    fn dated_items_are_shown_under_their_day_in_the_order_they_happened() {
        let counter = TokenCounter::new(Encoding::Cl100kBase);
        let costs = Costs::new(&counter);
        let ranked = vec![
            said(
                &counter,
                "best",
                "2026-11-24T10:00:00Z",
                "The deploy is on Friday.",
            ),
            said(
                &counter,
                "second",
                "2026-11-23T09:00:00Z",
                "Which day do we deploy?",
            ),
            said(
                &counter,
                "third",
                "2026-11-24T08:00:00Z",
                "Smoke tests first.",
            ),
        ];
        let (sections, tokens, left) = pack_evidence(&costs, ranked);
        assert!(left.is_empty());
        let handles: Vec<(&str, &str)> = sections[0]
            .items
            .iter()
            .map(|p| (p.handle.as_str(), p.item.id.as_str()))
            .collect();
        assert_eq!(
            handles,
            [("E1", "best"), ("E2", "second"), ("E3", "third")],
            "items and handles keep the rank"
        );
        let prompt = render(&sections);
        assert_eq!(
            prompt,
            "## retrieved_evidence\n\
             ### 2026-11-23\n[E2] alice · 09:00\nWhich day do we deploy?\n\
             ### 2026-11-24\n[E3] alice · 08:00\nSmoke tests first.\n\
             [E1] alice · 10:00\nThe deploy is on Friday.\n"
        );
        assert_eq!(counter.count(&prompt), tokens);
    }

    #[test]
    fn a_day_heading_is_paid_once_for_all_the_items_of_its_day() {
        let counter = TokenCounter::new(Encoding::Cl100kBase);
        let costs = Costs::new(&counter);
        let text = "The nightly export failed because the database was slow again.";
        let fits = |days_apart: bool| {
            let items = (0..200)
                .map(|i| {
                    let day = if days_apart { 1 + i % 28 } else { 1 };
                    said(
                        &counter,
                        &format!("e{i}"),
                        &format!("2026-02-{day:02}T10:00:00Z"),
                        text,
                    )
                })
                .collect();
            let (sections, _, _) = pack_evidence(&costs, items);
            sections[0].items.len()
        };
        let (one_day, many_days) = (fits(false), fits(true));
        assert!(
            one_day > many_days,
            "{one_day} items of one day, {many_days} of many"
        );
    }

    #[test]
    fn a_small_budget_is_scaled_and_then_filled_by_priority() {
        let counter = TokenCounter::new(Encoding::O200kBase);
        let costs = Costs::new(&counter);
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let items: Vec<Item> = (0..100)
            .filter_map(|i| {
                Item::counted(
                    "evidence",
                    format!("e{i}"),
                    render::meta(["alice"], at),
                    "The nightly export failed because the database was slow again.",
                    vec![],
                    &counter,
                )
            })
            .collect();
        let (sections, tokens, left) = pack_evidence(&costs, items);
        // Alone, evidence gets more than its scaled cap (28000/65000 of
        // 2000 = 861) but never the reserve (8800/65000 = 270).
        assert!(tokens > 861, "{tokens}");
        assert!(tokens <= 2_000 - 270, "{tokens}");
        assert_eq!(sections[0].items[0].handle, "E1");
        assert_eq!(sections[0].items[0].item.id, "e0", "best ranked first");
        assert!(!left.is_empty());
    }
}
