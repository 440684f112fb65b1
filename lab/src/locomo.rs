//! `memd-bench locomo`: retrieval quality on LoCoMo conversations, scored as
//! `locomo_kit.py` defines it, beside baselines computed in the same run
//! (BM25, exact cosine search with memd's embedder, and their fusion).
//!
//! Corpus, queries and metric follow the kit: every turn of a conversation
//! is one memory item (`<speaker>: <text>`, plus ` [shares <caption>]`),
//! questions of categories 1-4 with evidence are asked, and recall is the
//! share of a question's evidence turns in the top k (R@k) or in the ranked
//! turns that fit 2,000 tokens at 4 characters a token (R@2000tok).
//!
//! memd: each conversation is appended over HTTP as an agent records it
//! ([`Recording::Agent`]), and once more as the kit's corpus reads it, each
//! time into a tenant of its own; each question builds a bundle with
//! `max_tokens` 2,000 from another session (so the recent window is empty)
//! and its ranking is the order of `retrieved_evidence`. BM25 ranks every
//! turn of the conversation (k1 1.2, b 0.75, lowercase alphanumeric words
//! without stopwords, no stemming); exact search ranks every turn by its
//! cosine with the question, its vector the turn's alone or, for the
//! parity row, made as memd's embeddings projection makes a message's.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Context;
use chrono::{DateTime, NaiveDateTime, Utc};
use serde_json::{Value, json};

use super::harness::{
    ScratchDatabase, environment, percentile, report_header, start_daemon, wait_embedded,
    wait_projected, write_report,
};
use super::histories::{self, History};
use memd::{
    db,
    domain::tenant::{Scope, TenantId},
    read::semantic::SemanticConfig,
    tenants,
};
use memd_projectors::projections::embeddings;

/// The budget each question is asked with.
const MAX_TOKENS: u32 = 2_000;
/// The budget of the rows that compare rankings: the turns that fit 2,000
/// tokens of bare text fit in its evidence with their headers.
const RANKING_TOKENS: u32 = 8_000;

/// Questions about what no LoCoMo conversation (chat about people's lives)
/// holds: asked of every conversation, each should get no evidence. They
/// check the absolute relevance floor (`min_similarity`, the embedder's
/// calibrated cosine for unrelated texts), whatever conversations are
/// measured; none was chosen by looking at memd's answers.
const OFF_TOPIC: &[&str] = &[
    "quantum chromodynamics lattice",
    "page table entries of the Linux kernel",
    "IFRS 16 lease liability accounting",
    "enzymes of the Krebs cycle",
    "CRISPR off-target cleavage rates",
    "the Treaty of Westphalia",
    "TCP congestion window after packet loss",
    "B-tree node split on insert",
    "Navier-Stokes existence and smoothness",
    "Byzantine fault tolerant quorum size",
    "mitochondrial DNA haplogroups",
    "the half-life of carbon-14",
    "SQL window functions over partitions",
    "the Higgs boson decay channels",
    "tectonic subduction zones",
    "Basel III capital requirements",
    "eigenvalues of a symmetric matrix",
    "the Rust borrow checker's lifetimes",
    "photosynthesis light-dependent reactions",
    "the Peace of Augsburg in 1555",
];

/// How the off-topic questions were answered, under one policy.
#[derive(Debug, Clone)]
struct OffTopic {
    policy: String,
    asked: usize,
    /// Bundles that held any evidence.
    with_evidence: usize,
    /// Evidence items in all of them.
    items: usize,
    /// Of those, how many share no word with the question (found by
    /// meaning alone).
    by_meaning_only: usize,
}

pub struct Options {
    pub dir: PathBuf,
    pub kit: Option<PathBuf>,
    /// Sizes of other history (events) each conversation is recorded into,
    /// for recall at scale; none for none.
    pub history: Vec<u64>,
    /// The embedder of the hybrid and semantic systems, and its model.
    pub semantic: SemanticConfig,
    /// The quality tier's embedder (`mpnet`): the conversations are also
    /// recorded into tenants that chose it; none to skip.
    pub quality: Option<String>,
}

/// One memory item of the corpus.
#[derive(Debug, Clone)]
struct Turn {
    id: String,
    speaker: String,
    /// The conversation's session the turn was said in.
    session: u32,
    ts: DateTime<Utc>,
    /// The kit's memory item: `<speaker>: <said>`.
    text: String,
    /// What the speaker said (with ` [shares <caption>]`), as an agent
    /// records it: the speaker is the actor, not part of the text.
    said: String,
}

#[derive(Debug, Clone)]
struct Question {
    qid: String,
    question: String,
    evidence: Vec<String>,
    category: i64,
}

#[derive(Debug, Clone)]
struct Conversation {
    name: String,
    turns: Vec<Turn>,
    questions: Vec<Question>,
}

/// The text of every turn of the conversations in `dir`.
pub(super) fn turn_texts(dir: &Path) -> anyhow::Result<Vec<String>> {
    Ok(conversations(dir)?
        .into_iter()
        .flat_map(|c| c.turns.into_iter().map(|t| t.text))
        .collect())
}

/// Reads every `*.json` of `dir`, as the kit does.
fn conversations(dir: &Path) -> anyhow::Result<Vec<Conversation>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    let mut conversations = Vec::new();
    for path in paths {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .context("file name")?
            .to_owned();
        let raw = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let conversation: Value =
            serde_json::from_str(&raw).with_context(|| format!("parsing {}", path.display()))?;
        conversations.push(parse(name, &conversation)?);
    }
    anyhow::ensure!(
        !conversations.is_empty(),
        "no LoCoMo *.json files in {}",
        dir.display()
    );
    Ok(conversations)
}

fn parse(name: String, conversation: &Value) -> anyhow::Result<Conversation> {
    let object = conversation
        .as_object()
        .context("a conversation is a JSON object")?;
    let mut turns = Vec::new();
    for (key, value) in object {
        let Some(session) = key
            .strip_prefix("session_")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(items) = value.as_array() else {
            continue;
        };
        let date = object
            .get(&format!("session_{session}_date_time"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let ts = parse_date(date).unwrap_or(DateTime::UNIX_EPOCH);
        for item in items {
            let speaker = item["speaker"].as_str().unwrap_or_default().to_owned();
            let mut said = item["text"].as_str().unwrap_or_default().to_owned();
            if let Some(caption) = item.get("blip_caption").and_then(Value::as_str)
                && !caption.is_empty()
            {
                said.push_str(&format!(" [shares {caption}]"));
            }
            turns.push((
                session,
                Turn {
                    id: item["dia_id"].as_str().unwrap_or_default().to_owned(),
                    text: format!("{speaker}: {said}"),
                    speaker,
                    session,
                    ts,
                    said,
                },
            ));
        }
    }
    // Sessions in order (object keys are not), turns in file order within.
    turns.sort_by_key(|(session, _)| *session);
    let turns: Vec<Turn> = turns.into_iter().map(|(_, turn)| turn).collect();
    let ids: std::collections::HashSet<&str> = turns.iter().map(|t| t.id.as_str()).collect();
    let mut questions = Vec::new();
    for (index, qa) in conversation["qa"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let category = qa["category"].as_i64().unwrap_or(0);
        if category == 5 {
            continue;
        }
        let mut evidence: Vec<String> = Vec::new();
        for entry in qa["evidence"].as_array().into_iter().flatten() {
            for part in entry
                .as_str()
                .unwrap_or_default()
                .trim()
                .split(|c: char| c == ';' || c == ',' || c.is_whitespace())
            {
                if ids.contains(part) {
                    evidence.push(part.to_owned());
                }
            }
        }
        evidence.sort();
        evidence.dedup();
        if evidence.is_empty() {
            continue;
        }
        questions.push(Question {
            qid: format!("{name}/{index}"),
            question: qa["question"].as_str().unwrap_or_default().to_owned(),
            evidence,
            category,
        });
    }
    Ok(Conversation {
        name,
        turns,
        questions,
    })
}

/// `1:56 pm on 8 May, 2023`.
fn parse_date(raw: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(raw.trim(), "%I:%M %p on %d %B, %Y")
        .ok()
        .map(|naive| naive.and_utc())
}

/// A system's ranking of one question's turns, and how long it took.
#[derive(Debug, Clone)]
struct Ranking {
    qid: String,
    ranked: Vec<String>,
    /// Evidence items that are no turn of the conversation (other history).
    others: usize,
    ms: f64,
}

pub async fn run(database_url: &str, options: Options, out: &Path) -> anyhow::Result<()> {
    if let Some(kit) = &options.kit {
        anyhow::ensure!(kit.is_file(), "--kit {}: no such file", kit.display());
    }
    let conversations = conversations(&options.dir)?;
    let scratch = ScratchDatabase::create(database_url, "memd_bench").await?;
    let result = measure(
        &scratch,
        &conversations,
        &options.semantic,
        options.quality.as_deref(),
        &options.history,
    )
    .await;
    scratch.drop_now().await?;
    let (systems, off_topic, environment) = result?;

    let results_dir = out.with_extension("results");
    std::fs::create_dir_all(&results_dir)?;
    let mut rows = Vec::new();
    for (system, rankings) in &systems {
        let file = results_dir.join(format!("{}.jsonl", slug(system)));
        let lines: String = rankings
            .iter()
            .map(|r| json!({"qid": r.qid, "ranked": r.ranked, "ms": r.ms}).to_string() + "\n")
            .collect();
        std::fs::write(&file, lines)?;
        let ours = score(&conversations, rankings);
        let kit = options
            .kit
            .as_deref()
            .and_then(|kit| kit_score(kit, &options.dir, &file));
        if let Some(kit) = &kit {
            for (metric, value) in &ours.recall {
                let theirs = kit.get(metric).and_then(Value::as_f64).unwrap_or(f64::NAN);
                anyhow::ensure!(
                    (theirs - value).abs() < 1e-3,
                    "{system}: {metric} is {value:.4} here but {theirs:.4} by locomo_kit.py"
                );
            }
        }
        rows.push((system.clone(), ours, kit.is_some(), file));
    }
    super::charts::lines(
        &super::charts::path_beside(out, ""),
        "LoCoMo: recall of evidence turns in the top k, by system",
        &super::charts::Axis::log("k (ranked turns read)"),
        &super::charts::Axis::share("recall (share of evidence turns found)"),
        &super::charts::grouped(
            rows.iter()
                .filter(|(system, ..)| charted(system))
                .flat_map(|(system, scores, ..)| {
                    KS.iter().map(move |k| {
                        (
                            system.clone(),
                            *k as f64,
                            scores.recall.get(&format!("R@{k}")).copied().unwrap_or(0.0),
                        )
                    })
                }),
            |name| name == "BM25",
        ),
    )?;
    let mut report = render(&conversations, &rows, &options, &environment);
    let _ = writeln!(
        report,
        "\nOff-topic questions ({} about what no conversation holds, e.g. \"{}\", asked of every conversation): \
         bundles that still held evidence, and how many of their items share no word with the question.\n\n| policy | asked | with evidence | evidence items | by meaning alone |\n|---|---:|---:|---:|---:|",
        OFF_TOPIC.len(),
        OFF_TOPIC[0]
    );
    for row in &off_topic {
        let _ = writeln!(
            report,
            "| {} | {} | {} | {} | {} |",
            row.policy, row.asked, row.with_evidence, row.items, row.by_meaning_only
        );
    }
    write_report(out, &report)
}

/// Whether `system` is drawn in the chart: memd's default, each of its
/// sides, its quality tier, at scale, and the baselines; not the policy
/// variants, which the table shows (ten lines are already many).
fn charted(system: &str) -> bool {
    // How the question is embedded: a variant, whatever the system.
    if system.contains("question_precision") || system.contains("questions in 8 bits") {
        return false;
    }
    let default = system.ends_with(", default policy)");
    (system.starts_with("memd hybrid (") && default)
        || system.starts_with("memd lexical only")
        || (system.starts_with("memd semantic only (") && system.ends_with("lexical_weight 0)"))
        || system.starts_with("memd quality tier: hybrid")
        || (system.contains("default policy), among"))
        || !system.starts_with("memd")
}

fn slug(system: &str) -> String {
    system
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// How a conversation is written into memd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recording {
    /// As an agent records a conversation while it happens: a session per
    /// conversation session, each speaker as the actor (the text is what
    /// they said, without their name), two tags per turn, each turn at its
    /// session's date. Session ids are the conversation's own
    /// (`locomo-session-<n>`): the bench's other history numbers its sessions
    /// `session-<n>`, and a shared id would make its last message the turn
    /// before a conversation session's first (the context a message is
    /// embedded with), which no agent recording two pieces of work does.
    Agent,
    /// As the kit's corpus reads it: one session, each turn's text
    /// `<speaker>: <said>`, at its session's date, no tags.
    Corpus,
}

impl Recording {
    fn name(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Corpus => "corpus",
        }
    }

    fn event(self, turn: &Turn) -> Value {
        match self {
            Self::Agent => json!({
                "session_id": format!("locomo-session-{}", turn.session), "channel": "private",
                "actor": {"type": "human", "id": turn.speaker}, "kind": "message",
                "ts": turn.ts, "tags": ["conversation", format!("session-{}", turn.session)],
                "content": {"text": turn.said}}),
            Self::Corpus => json!({
                "session_id": "locomo-conversation", "channel": "private",
                "actor": {"type": "human", "id": turn.speaker}, "kind": "message",
                "ts": turn.ts, "content": {"text": turn.text}}),
        }
    }
}

/// Each conversation's tenant token under one recording.
type Tokens = HashMap<String, String>;

/// Records each conversation into a tenant of its own, after the work
/// (messages, tool calls and results) among the first `history` events of
/// the bench's histories (half chat, half tool-heavy): what a tenant
/// already holds when a conversation begins.
async fn record(
    pool: &sqlx::PgPool,
    client: &reqwest::Client,
    base: &str,
    conversations: &[Conversation],
    (recording, history, embedder): (Recording, u64, Option<&str>),
    dia_of_event: &mut HashMap<String, String>,
) -> anyhow::Result<Tokens> {
    let mut tokens = HashMap::new();
    for conversation in conversations {
        let tenant = TenantId::parse(&format!(
            "locomo-{}-h{history}-{}-{}",
            recording.name(),
            embedder.unwrap_or("default"),
            slug(&conversation.name)
        ))
        .map_err(|e| anyhow::anyhow!("tenant name: {}", e.message))?;
        let token = tenants::create_tenant(pool, &tenant, Scope::Admin)
            .await?
            .expose()
            .to_string();
        if let Some(embedder) = embedder {
            // Chosen before its first event: nothing to build or switch.
            memd_projectors::embed_worker::choose(pool, tenant.as_str(), embedder, None).await?;
        }
        // Work, not standing state: decisions, tasks and views of the
        // history would fill the bundle's sections above the evidence (by
        // design), and this measures what retrieval finds.
        let work = |event: &Value| {
            matches!(
                event["kind"].as_str(),
                Some("message" | "tool_call" | "tool_result")
            )
        };
        let half = history / 2;
        histories::load_where(pool, &tenant, History::Chat, 0, half, work).await?;
        histories::load_where(pool, &tenant, History::ToolHeavy, half, history, work).await?;
        for batch in conversation.turns.chunks(500) {
            let events: Vec<Value> = batch.iter().map(|turn| recording.event(turn)).collect();
            let response: Value = client
                .post(format!("{base}/api/v1/events"))
                .bearer_auth(&token)
                .json(&json!({"events": events}))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            for (turn, appended) in batch
                .iter()
                .zip(response["events"].as_array().context("events")?)
            {
                let event_id = appended["event_id"].as_str().context("event_id")?;
                dia_of_event.insert(event_id.to_owned(), turn.id.clone());
            }
        }
        tokens.insert(conversation.name.clone(), token);
    }
    Ok(tokens)
}

async fn measure(
    scratch: &ScratchDatabase,
    conversations: &[Conversation],
    semantic: &SemanticConfig,
    quality: Option<&str>,
    history: &[u64],
) -> anyhow::Result<(Vec<(String, Vec<Ranking>)>, Vec<OffTopic>, String)> {
    let pool = db::connect(scratch.options.clone(), 8).await?;
    db::migrate(&pool).await?;
    let environment = environment(&pool).await?;
    let mut daemon_semantic = semantic.clone();
    daemon_semantic.also.extend(quality.map(str::to_owned));
    let daemon = start_daemon(pool.clone(), daemon_semantic).await?;
    let embedder = semantic.embedder.as_deref().unwrap_or("none");
    let client = reqwest::Client::new();
    let base = daemon.base_url.clone();

    let mut dia_of_event: HashMap<String, String> = HashMap::new();
    let agent = record(
        &pool,
        &client,
        &base,
        conversations,
        (Recording::Agent, 0, None),
        &mut dia_of_event,
    )
    .await?;
    let corpus = record(
        &pool,
        &client,
        &base,
        conversations,
        (Recording::Corpus, 0, None),
        &mut dia_of_event,
    )
    .await?;
    let quality_tier = match quality {
        Some(name) => Some((
            name,
            record(
                &pool,
                &client,
                &base,
                conversations,
                (Recording::Agent, 0, Some(name)),
                &mut dia_of_event,
            )
            .await?,
        )),
        None => None,
    };
    wait_projected(&pool).await?;
    let embedding_started = Instant::now();
    wait_embedded(&pool, semantic.embedder.as_deref()).await?;
    eprintln!(
        "embedded in {:.1}s (after projection)",
        embedding_started.elapsed().as_secs_f64()
    );

    // The same questions under several policies: the default (hybrid),
    // each side of it alone, and variants, all of conversations recorded
    // as an agent records them; then the default again over the kit's
    // corpus, to show what the recording changes.
    let mut systems = Vec::new();
    for (system, tokens, policy, max_tokens) in [
        (
            format!("memd hybrid ({embedder}, default policy)"),
            &agent,
            json!({}),
            MAX_TOKENS,
        ),
        // The default without its rerank stage: what the neighbours' lift
        // adds.
        (
            format!("memd hybrid ({embedder}, no rerank: neighbour_weight 0)"),
            &agent,
            json!({"scoring": {"neighbour_weight": 0.0}}),
            MAX_TOKENS,
        ),
        (
            "memd lexical only (semantic_weight 0)".to_owned(),
            &agent,
            json!({"scoring": {"semantic_weight": 0.0}}),
            MAX_TOKENS,
        ),
        (
            format!("memd semantic only ({embedder}, lexical_weight 0)"),
            &agent,
            json!({"scoring": {"lexical_weight": 0.0, "semantic_weight": 1.0}}),
            MAX_TOKENS,
        ),
        (
            format!(
                "memd semantic only ({embedder}, lexical_weight 0, by relevance alone: beta 0, gamma 0, no floors, no dedupe, no rerank)"
            ),
            &agent,
            meaning_alone(),
            MAX_TOKENS,
        ),
        (
            format!("memd hybrid ({embedder}, alpha 0.9, beta 0, gamma 0.1)"),
            &agent,
            without_recency(),
            MAX_TOKENS,
        ),
        // Questions embedded in f32 rather than 8 bits: what the cheaper
        // question costs in recall.
        (
            format!("memd hybrid ({embedder}, questions in f32: question_precision exact)"),
            &agent,
            exact_questions(json!({})),
            MAX_TOKENS,
        ),
        (
            format!("memd hybrid ({embedder}, rrf fusion)"),
            &agent,
            json!({"scoring": {"fusion": "rrf"}}),
            MAX_TOKENS,
        ),
        // The default without its absolute floor of meaning: what the
        // floor costs in recall.
        (
            format!("memd hybrid ({embedder}, no similarity floor: min_similarity -1)"),
            &agent,
            json!({"scoring": {"min_similarity": -1.0}}),
            MAX_TOKENS,
        ),
        // Rankings rather than bundles: a budget large enough that the
        // kit's 2,000 tokens of bare text end inside the evidence, so the
        // order is compared with the baselines' on equal terms (a bundle
        // spends part of its budget on headers and citations).
        (
            format!(
                "memd hybrid ({embedder}, default policy), ranking (max_tokens {RANKING_TOKENS})"
            ),
            &agent,
            json!({}),
            RANKING_TOKENS,
        ),
        (
            format!(
                "memd semantic only ({embedder}, by relevance alone), ranking (max_tokens {RANKING_TOKENS})"
            ),
            &agent,
            meaning_alone(),
            RANKING_TOKENS,
        ),
        // Parity with the exact row over memd's units, whose questions are
        // embedded in f32 too.
        (
            format!(
                "memd semantic only ({embedder}, by relevance alone, question_precision exact), ranking (max_tokens {RANKING_TOKENS})"
            ),
            &agent,
            exact_questions(meaning_alone()),
            RANKING_TOKENS,
        ),
        (
            format!("memd hybrid ({embedder}, default policy), recorded as the kit's corpus"),
            &corpus,
            json!({}),
            MAX_TOKENS,
        ),
    ]
    .into_iter()
    .chain(quality_tier.iter().flat_map(|(name, tokens)| {
        [
            (
                format!("memd quality tier: hybrid ({name}, default policy)"),
                tokens,
                json!({}),
                MAX_TOKENS,
            ),
            (
                format!("memd quality tier: hybrid ({name}, no rerank: neighbour_weight 0)"),
                tokens,
                json!({"scoring": {"neighbour_weight": 0.0}}),
                MAX_TOKENS,
            ),
            (
                format!(
                    "memd quality tier: hybrid ({name}, questions in f32: question_precision exact)"
                ),
                tokens,
                exact_questions(json!({})),
                MAX_TOKENS,
            ),
            (
                format!("memd quality tier: semantic only ({name}, lexical_weight 0)"),
                tokens,
                json!({"scoring": {"lexical_weight": 0.0, "semantic_weight": 1.0}}),
                MAX_TOKENS,
            ),
        ]
    })) {
        set_policy(&client, &base, tokens, &policy).await?;
        systems.push((
            system,
            ask_all(
                &client,
                &base,
                conversations,
                tokens,
                &dia_of_event,
                max_tokens,
            )
            .await?,
        ));
    }
    // Recall at scale: the same questions of each conversation recorded
    // into a tenant that already holds `size` events of other work.
    for &size in history {
        let tokens = record(
            &pool,
            &client,
            &base,
            conversations,
            (Recording::Agent, size, None),
            &mut dia_of_event,
        )
        .await?;
        wait_projected(&pool).await?;
        wait_embedded(&pool, semantic.embedder.as_deref()).await?;
        if semantic.embedder.is_some() {
            vector_index_loaded(&client, &base, &tokens).await?;
        }
        for (policy, scoring) in [
            ("default policy", json!({})),
            ("alpha 0.9, beta 0, gamma 0.1", without_recency()),
        ] {
            set_policy(&client, &base, &tokens, &scoring).await?;
            systems.push((
                format!("memd hybrid ({embedder}, {policy}), among {size} events of other history"),
                ask_all(
                    &client,
                    &base,
                    conversations,
                    &tokens,
                    &dia_of_event,
                    MAX_TOKENS,
                )
                .await?,
            ));
        }
    }
    let bm25 = bm25_all(conversations);
    let mut loader = memd_embedder::Loader::default();
    for name in semantic.embedder.as_deref().into_iter().chain(quality) {
        let model = loader
            .load(name, &semantic.models)
            .map_err(|e| anyhow::anyhow!("loading {name} for exact search: {e}"))?;
        let exact = exact_dense_all(conversations, model.as_ref(), Units::Turns)?;
        systems.push((
            format!("naive RRF of BM25 and exact {name} (k 60)"),
            reciprocal_rank_fusion(&bm25, &exact),
        ));
        systems.push((format!("exact {name} cosine (every turn)"), exact));
        systems.push((
            format!(
                "exact {name} cosine over memd's units (every turn, alone and after the one before)"
            ),
            exact_dense_all(conversations, model.as_ref(), Units::AsMemdEmbeds)?,
        ));
        systems.push((
            format!(
                "exact {name} cosine over memd's units, questions in 8 bits as memd embeds them"
            ),
            exact_dense_all(conversations, model.as_ref(), Units::AsMemdAsks)?,
        ));
    }
    systems.push(("BM25".to_owned(), bm25));
    let mut off_topic = Vec::new();
    for (policy, scoring) in [
        ("default", json!({})),
        (
            "no similarity floor (min_similarity -1)",
            json!({"scoring": {"min_similarity": -1.0}}),
        ),
    ] {
        set_policy(&client, &base, &agent, &scoring).await?;
        off_topic.push(ask_off_topic(&client, &base, &agent, policy).await?);
    }
    daemon.stop().await?;
    pool.close().await;
    Ok((systems, off_topic, environment))
}

/// Waits until each tenant's bundles search its vectors: a large tenant's
/// index loads in the background after its first bundle, and the
/// questions must not be answered by words alone meanwhile.
async fn vector_index_loaded(
    client: &reqwest::Client,
    base: &str,
    tokens: &Tokens,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    for token in tokens.values() {
        loop {
            let acb: Value = client
                .post(format!("{base}/api/v1/acb/build"))
                .bearer_auth(token)
                .json(
                    &json!({"session_id": "questions", "query_text": "what happened",
                              "max_tokens": MAX_TOKENS}),
                )
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            if acb["provenance"]["semantic"]["used"] == true {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the vector index was not loaded in 10 minutes: {}",
                acb["provenance"]["semantic"]
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// Ranking by meaning alone: no lexical weight, recency, importance,
/// floors or dedupe (what exact cosine search does).
fn meaning_alone() -> Value {
    json!({"scoring": {"lexical_weight": 0.0, "semantic_weight": 1.0, "beta": 0.0,
                       "gamma": 0.0, "min_relevance": 0.0, "min_similarity": -1.0,
                       "neighbour_weight": 0.0},
           "duplicate_similarity": 1.0})
}

/// `policy` with each question embedded in f32, as stored vectors are.
fn exact_questions(mut policy: Value) -> Value {
    policy["scoring"]["question_precision"] = json!("exact");
    policy
}

/// The hybrid without recency: LoCoMo asks about any point of months of
/// conversation, so "recent" is not "relevant".
fn without_recency() -> Value {
    json!({"scoring": {"alpha": 0.9, "beta": 0.0, "gamma": 0.1}})
}

async fn set_policy(
    client: &reqwest::Client,
    base: &str,
    tokens: &Tokens,
    policy: &Value,
) -> anyhow::Result<()> {
    for token in tokens.values() {
        client
            .put(format!("{base}/api/v1/policy"))
            .bearer_auth(token)
            .json(policy)
            .send()
            .await?
            .error_for_status()?;
    }
    Ok(())
}

/// Turns ranked by the baselines computed here (BM25, exact search, RRF):
/// more than 2,000 tokens of turns.
const BASELINE_DEPTH: usize = 100;

/// What exact search embeds of each turn.
#[derive(Debug, Clone, Copy)]
enum Units {
    /// The kit's memory item alone.
    Turns,
    /// As memd's embeddings projection embeds a message recorded as an
    /// agent records it: alone and read after the message before it in
    /// its session, the two vectors summed
    /// ([`embeddings::after_previous`], [`embeddings::with_context`]). What
    /// memd's semantic ranking is compared with for parity: the same
    /// vectors, searched exactly.
    AsMemdEmbeds,
    /// [`Units::AsMemdEmbeds`], each question embedded as memd embeds a
    /// bundle's question ([`memd_embedder::Embedder::embed_questions`]: in
    /// 8 bits where the model has that path).
    AsMemdAsks,
}

/// Every turn ranked by its cosine with the question, with `model`'s
/// vectors of the kit's memory items, embedded as `units` says (exact
/// search: no index, no other score).
fn exact_dense_all(
    conversations: &[Conversation],
    model: &dyn memd_embedder::Embedder,
    units: Units,
) -> anyhow::Result<Vec<Ranking>> {
    let mut rankings = Vec::new();
    for conversation in conversations {
        let texts: Vec<&str> = conversation.turns.iter().map(|t| t.text.as_str()).collect();
        let mut vectors = model
            .embed(&texts)
            .map_err(|e| anyhow::anyhow!("embedding turns: {e}"))?;
        if let Units::AsMemdEmbeds | Units::AsMemdAsks = units {
            // A turn's previous message: the turn before it in the same
            // conversation session (a memd session of its own).
            let (after, inputs): (Vec<usize>, Vec<String>) = conversation
                .turns
                .windows(2)
                .enumerate()
                .filter(|(_, pair)| pair[0].session == pair[1].session)
                .map(|(index, pair)| {
                    (
                        index + 1,
                        embeddings::after_previous(&pair[0].text, &pair[1].text),
                    )
                })
                .unzip();
            let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
            let in_context = model
                .embed(&inputs)
                .map_err(|e| anyhow::anyhow!("embedding turns in context: {e}"))?;
            for (index, context) in after.into_iter().zip(in_context) {
                embeddings::with_context(&mut vectors[index], &context);
            }
        }
        for question in &conversation.questions {
            let started = Instant::now();
            let asked = match units {
                Units::AsMemdAsks => model.embed_questions(&[question.question.as_str()]),
                Units::Turns | Units::AsMemdEmbeds => model.embed(&[question.question.as_str()]),
            }
            .map_err(|e| anyhow::anyhow!("embedding a question: {e}"))?;
            let mut scored: Vec<(f32, usize)> = vectors
                .iter()
                .enumerate()
                .map(|(index, v)| (dot(v, &asked[0]), index))
                .collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            rankings.push(Ranking {
                qid: question.qid.clone(),
                ranked: scored
                    .iter()
                    .take(BASELINE_DEPTH)
                    .map(|(_, index)| conversation.turns[*index].id.clone())
                    .collect(),
                others: 0,
                ms: started.elapsed().as_secs_f64() * 1e3,
            });
        }
    }
    Ok(rankings)
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Reciprocal rank fusion of two rankings of the same questions: a turn
/// scores 1/(60 + rank) in each list it is in.
fn reciprocal_rank_fusion(a: &[Ranking], b: &[Ranking]) -> Vec<Ranking> {
    let others: HashMap<&str, &Ranking> = b.iter().map(|r| (r.qid.as_str(), r)).collect();
    a.iter()
        .map(|first| {
            let mut scores: HashMap<&str, f64> = HashMap::new();
            let second = others.get(first.qid.as_str()).map(|r| r.ranked.as_slice());
            for ranked in [Some(first.ranked.as_slice()), second]
                .into_iter()
                .flatten()
            {
                for (rank, turn) in ranked.iter().enumerate() {
                    *scores.entry(turn.as_str()).or_default() += 1.0 / (60.0 + rank as f64 + 1.0);
                }
            }
            let mut fused: Vec<(&str, f64)> = scores.into_iter().collect();
            fused.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(y.0)));
            Ranking {
                qid: first.qid.clone(),
                ranked: fused
                    .into_iter()
                    .take(BASELINE_DEPTH)
                    .map(|(turn, _)| turn.to_owned())
                    .collect(),
                others: 0,
                ms: first.ms + others.get(first.qid.as_str()).map_or(0.0, |r| r.ms),
            }
        })
        .collect()
}

/// Asks every [`OFF_TOPIC`] question of every conversation.
async fn ask_off_topic(
    client: &reqwest::Client,
    base: &str,
    tokens: &Tokens,
    policy: &str,
) -> anyhow::Result<OffTopic> {
    let mut answered = OffTopic {
        policy: policy.to_owned(),
        asked: 0,
        with_evidence: 0,
        items: 0,
        by_meaning_only: 0,
    };
    for token in tokens.values() {
        for question in OFF_TOPIC {
            let acb: Value = client
                .post(format!("{base}/api/v1/acb/build"))
                .bearer_auth(token)
                .json(
                    &json!({"session_id": "questions", "channel": "private", "intent": "question",
                              "query_text": question, "max_tokens": MAX_TOKENS}),
                )
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let items: Vec<&Value> = acb["sections"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["name"] == "retrieved_evidence")
                .flat_map(|s| s["items"].as_array().into_iter().flatten())
                .collect();
            answered.asked += 1;
            answered.with_evidence += usize::from(!items.is_empty());
            answered.items += items.len();
            answered.by_meaning_only += items
                .iter()
                .filter(|item| item["lexical"].as_f64().unwrap_or(0.0) <= 0.0)
                .count();
        }
    }
    Ok(answered)
}

async fn ask_all(
    client: &reqwest::Client,
    base: &str,
    conversations: &[Conversation],
    tokens: &Tokens,
    dia_of_event: &HashMap<String, String>,
    max_tokens: u32,
) -> anyhow::Result<Vec<Ranking>> {
    let mut rankings = Vec::new();
    for conversation in conversations {
        let token = &tokens[&conversation.name];
        for question in &conversation.questions {
            let started = Instant::now();
            let acb: Value = client
                .post(format!("{base}/api/v1/acb/build"))
                .bearer_auth(token)
                .json(
                    &json!({"session_id": "questions", "channel": "private", "intent": "question",
                              "query_text": question.question, "max_tokens": max_tokens}),
                )
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let ms = started.elapsed().as_secs_f64() * 1e3;
            let mut ranked: Vec<String> = Vec::new();
            let mut others = 0;
            for section in acb["sections"].as_array().into_iter().flatten() {
                if section["name"] != "retrieved_evidence" {
                    continue;
                }
                for item in section["items"].as_array().into_iter().flatten() {
                    match item["event_id"].as_str().and_then(|e| dia_of_event.get(e)) {
                        Some(dia) if !ranked.contains(dia) => ranked.push(dia.clone()),
                        Some(_) => {}
                        None => others += 1,
                    }
                }
            }
            rankings.push(Ranking {
                qid: question.qid.clone(),
                ranked,
                others,
                ms,
            });
        }
    }
    Ok(rankings)
}

const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "am", "an", "and", "any", "are", "as", "at", "be", "been", "but",
    "by", "can", "could", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her",
    "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "not", "of",
    "on", "or", "our", "she", "so", "that", "the", "their", "them", "there", "they", "this", "to",
    "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "would",
    "you", "your",
];

fn bm25_terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

/// Plain BM25 over each conversation's turns.
fn bm25_all(conversations: &[Conversation]) -> Vec<Ranking> {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;
    let mut rankings = Vec::new();
    for conversation in conversations {
        let documents: Vec<Vec<String>> = conversation
            .turns
            .iter()
            .map(|t| bm25_terms(&t.text))
            .collect();
        let n = documents.len() as f64;
        let average = documents.iter().map(Vec::len).sum::<usize>() as f64 / n.max(1.0);
        let mut df: HashMap<&str, f64> = HashMap::new();
        for document in &documents {
            let unique: std::collections::HashSet<&str> =
                document.iter().map(String::as_str).collect();
            for term in unique {
                *df.entry(term).or_default() += 1.0;
            }
        }
        for question in &conversation.questions {
            let started = Instant::now();
            let mut query = bm25_terms(&question.question);
            query.sort();
            query.dedup();
            let mut scored: Vec<(f64, usize)> = documents
                .iter()
                .enumerate()
                .map(|(index, document)| {
                    let length = document.len() as f64;
                    let score = query
                        .iter()
                        .map(|term| {
                            let tf = document.iter().filter(|w| *w == term).count() as f64;
                            if tf == 0.0 {
                                return 0.0;
                            }
                            let df = df.get(term.as_str()).copied().unwrap_or(0.0);
                            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                            idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length / average))
                        })
                        .sum();
                    (score, index)
                })
                .filter(|(score, _)| *score > 0.0)
                .collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            rankings.push(Ranking {
                qid: question.qid.clone(),
                ranked: scored
                    .iter()
                    .take(BASELINE_DEPTH)
                    .map(|(_, index)| conversation.turns[*index].id.clone())
                    .collect(),
                others: 0,
                ms: started.elapsed().as_secs_f64() * 1e3,
            });
        }
    }
    rankings
}

/// Recall as `locomo_kit.py score` computes it.
struct Scores {
    /// `R@1`, `R@5`, `R@10`, `R@25`, `R@50`, `R@2000tok`.
    recall: BTreeMap<String, f64>,
    by_category: BTreeMap<i64, (usize, f64, f64)>,
    queries: usize,
    /// Turns a ranking holds, on average (a bundle's evidence ends at its
    /// budget, after its own headers and citations).
    mean_ranked: f64,
    /// Evidence items of other history per bundle, on average.
    mean_others: f64,
    p50_ms: f64,
    p95_ms: f64,
}

const KS: [usize; 5] = [1, 5, 10, 25, 50];

fn score(conversations: &[Conversation], rankings: &[Ranking]) -> Scores {
    let by_qid: HashMap<&str, &Ranking> = rankings.iter().map(|r| (r.qid.as_str(), r)).collect();
    let mut totals: BTreeMap<String, f64> = BTreeMap::new();
    let mut by_category: BTreeMap<i64, (usize, f64, f64)> = BTreeMap::new();
    let mut latencies = Vec::new();
    let mut queries = 0;
    let mut ranked_turns = 0;
    let mut other_items = 0;
    for conversation in conversations {
        let text: HashMap<&str, &str> = conversation
            .turns
            .iter()
            .map(|t| (t.id.as_str(), t.text.as_str()))
            .collect();
        for question in &conversation.questions {
            let Some(ranking) = by_qid.get(question.qid.as_str()) else {
                continue;
            };
            queries += 1;
            ranked_turns += ranking.ranked.len();
            other_items += ranking.others;
            latencies.push(Duration::from_secs_f64(ranking.ms / 1e3));
            let evidence = question.evidence.len() as f64;
            let found = |items: &[String]| {
                question
                    .evidence
                    .iter()
                    .filter(|e| items.contains(e))
                    .count() as f64
                    / evidence
            };
            for k in KS {
                let top = &ranking.ranked[..k.min(ranking.ranked.len())];
                *totals.entry(format!("R@{k}")).or_default() += found(top);
            }
            let mut used = 0;
            let mut packed = Vec::new();
            for item in &ranking.ranked {
                let cost = text
                    .get(item.as_str())
                    .map_or(0, |t| t.chars().count().div_ceil(4));
                if used + cost > 2_000 {
                    break;
                }
                used += cost;
                packed.push(item.clone());
            }
            let budget = found(&packed);
            *totals.entry("R@2000tok".to_owned()).or_default() += budget;
            let top10 = found(&ranking.ranked[..10.min(ranking.ranked.len())]);
            let entry = by_category.entry(question.category).or_default();
            entry.0 += 1;
            entry.1 += top10;
            entry.2 += budget;
        }
    }
    let n = queries.max(1) as f64;
    Scores {
        recall: totals.into_iter().map(|(k, v)| (k, v / n)).collect(),
        by_category: by_category
            .into_iter()
            .map(|(c, (count, r10, rb))| (c, (count, r10 / count as f64, rb / count as f64)))
            .collect(),
        queries,
        mean_ranked: ranked_turns as f64 / n,
        mean_others: other_items as f64 / n,
        p50_ms: percentile(&latencies, 50.0).as_secs_f64() * 1e3,
        p95_ms: percentile(&latencies, 95.0).as_secs_f64() * 1e3,
    }
}

/// The kit's own scores of a result file, when python3 and the kit are here.
fn kit_score(kit: &Path, dir: &Path, results: &Path) -> Option<serde_json::Map<String, Value>> {
    if !kit.exists() {
        return None;
    }
    let output = std::process::Command::new("python3")
        .arg(kit)
        .arg("score")
        .arg(dir)
        .arg(results)
        .output()
        .ok()?;
    if !output.status.success() {
        eprintln!(
            "locomo_kit.py score failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return None;
    }
    serde_json::from_slice::<Value>(&output.stdout)
        .ok()?
        .as_object()
        .cloned()
}

fn render(
    conversations: &[Conversation],
    rows: &[(String, Scores, bool, PathBuf)],
    options: &Options,
    environment: &str,
) -> String {
    let mut out = report_header("locomo", environment);
    let turns: usize = conversations.iter().map(|c| c.turns.len()).sum();
    let questions: usize = conversations.iter().map(|c| c.questions.len()).sum();
    let names: Vec<&str> = conversations.iter().map(|c| c.name.as_str()).collect();
    let _ = writeln!(
        out,
        "Data: `{}`: conversations {} ({turns} turns, {questions} questions of categories 1-4 with evidence)\n",
        options.dir.display(),
        names.join(", ")
    );
    let _ = writeln!(
        out,
        "Each conversation is recorded twice, each time into a tenant of its own. As an agent records it (all rows \
         but one): a session per conversation session (ids `locomo-session-<n>`, apart from the other history's), each speaker as the actor and what they said as the text, \
         tags `conversation` and `session-<n>`, each turn at its session's date. As the kit's corpus (the row that \
         says so): one session, each turn's text `<speaker>: <said>`. Each question builds a bundle of `max_tokens` \
         {MAX_TOKENS} (channel private, from another session, so no recent window) and memd's ranking is the order of \
         its `retrieved_evidence`. Rows \"among N events of other history\": recorded as an agent into a tenant \
         that first received the messages, tool calls and tool results among N events of the bench's generated \
         histories (half chat, half tool-heavy, dated now; their decisions, tasks and views would fill the \
         sections above the evidence), the recall at scale. Outside memd, over the kit's items: BM25 (k1 1.2, b 0.75, lowercase words without \
         stopwords, no stemming), exact cosine with memd's embedder over every turn (f32 vectors, no index), and their \
         reciprocal-rank fusion (k 60); and exact cosine over memd's units, each turn's vector the normalised sum of \
         it alone and read after the turn before it in its session, as memd's embeddings projection embeds a message \
         (the same vectors memd searches, in f32 and exhaustively: the row memd's semantic-only ranking is compared \
         with for parity). Recall is `locomo_kit.py`'s: evidence turns found in the top k, or in the \
         ranked turns that fit 2,000 tokens at 4 characters a token. Turns ranked: the length of a ranking, on \
         average (a bundle's evidence ends at its budget, headers and citations included); other items: evidence \
         items of other history in a bundle, on average. Latency is per question: \
         the HTTP round trip for memd, the in-process ranking for the others.\n"
    );
    let _ = writeln!(
        out,
        "| system | R@1 | R@5 | R@10 | R@25 | R@50 | R@2000tok | turns ranked | other items | p50 ms | p95 ms |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (system, scores, _, _) in rows {
        let r = |k: &str| scores.recall.get(k).copied().unwrap_or(0.0);
        let _ = writeln!(
            out,
            "| {system} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} | {:.1} | {:.1} | {:.1} |",
            r("R@1"),
            r("R@5"),
            r("R@10"),
            r("R@25"),
            r("R@50"),
            r("R@2000tok"),
            scores.mean_ranked,
            scores.mean_others,
            scores.p50_ms,
            scores.p95_ms
        );
    }
    let _ = writeln!(
        out,
        "\nBy question category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop): R@10 / R@2000tok\n"
    );
    let categories: Vec<i64> = rows
        .first()
        .map(|(_, s, _, _)| s.by_category.keys().copied().collect())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "| system | {} |",
        categories
            .iter()
            .map(|c| format!("category {c} ({})", rows[0].1.by_category[c].0))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(out, "|---|{}", "---:|".repeat(categories.len()));
    for (system, scores, _, _) in rows {
        let cells: Vec<String> = categories
            .iter()
            .map(|c| {
                let (_, r10, rb) = scores.by_category.get(c).copied().unwrap_or_default();
                format!("{r10:.3} / {rb:.3}")
            })
            .collect();
        let _ = writeln!(out, "| {system} | {} |", cells.join(" | "));
    }
    let checked = rows.iter().all(|(_, _, kit, _)| *kit);
    let _ = writeln!(
        out,
        "\nRankings per question: {}. {}",
        rows.iter()
            .map(|(_, _, _, file)| format!("`{}`", file.display()))
            .collect::<Vec<_>>()
            .join(", "),
        if checked {
            "`locomo_kit.py score` gave the same recall for each (checked in this run)."
        } else {
            "`locomo_kit.py` was not found; recall computed here with its definition."
        }
    );
    let _ = writeln!(
        out,
        "Queries scored per system: {}.",
        rows.first().map_or(0, |r| r.1.queries)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_turns_parse_as_the_kit_reads_them() {
        assert_eq!(
            parse_date("1:56 pm on 8 May, 2023").unwrap().to_rfc3339(),
            "2023-05-08T13:56:00+00:00"
        );
        let conversation = json!({
            "session_2_date_time": "10:00 am on 9 May, 2023",
            "session_2": [{"speaker": "B", "dia_id": "D2:1", "text": "later"}],
            "session_1_date_time": "9:00 am on 8 May, 2023",
            "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "look", "blip_caption": "a cat"}],
            "qa": [
                {"question": "q0", "evidence": ["D1:1; D2:1"], "category": 1},
                {"question": "adversarial", "evidence": ["D1:1"], "category": 5},
                {"question": "no evidence", "evidence": ["D9:9"], "category": 2}
            ]
        });
        let parsed = parse("26".into(), &conversation).unwrap();
        assert_eq!(parsed.turns[0].id, "D1:1", "sessions in order");
        assert_eq!(parsed.turns[0].text, "A: look [shares a cat]");
        assert_eq!(parsed.turns[0].said, "look [shares a cat]");
        assert_eq!(parsed.turns[0].session, 1);
        assert_eq!(parsed.questions.len(), 1);
        assert_eq!(parsed.questions[0].qid, "26/0");
        assert_eq!(parsed.questions[0].evidence, ["D1:1", "D2:1"]);
    }

    #[test]
    fn recall_counts_evidence_in_the_top_k_and_in_2000_tokens() {
        let conversation = Conversation {
            name: "c".into(),
            turns: (0..3)
                .map(|i| Turn {
                    id: format!("D1:{i}"),
                    speaker: "A".into(),
                    session: 1,
                    ts: DateTime::UNIX_EPOCH,
                    text: "x".repeat(if i == 0 { 8_000 } else { 40 }),
                    said: String::new(),
                })
                .collect(),
            questions: vec![Question {
                qid: "c/0".into(),
                question: "q".into(),
                evidence: vec!["D1:1".into(), "D1:2".into()],
                category: 1,
            }],
        };
        let ranking = Ranking {
            qid: "c/0".into(),
            ranked: vec!["D1:1".into(), "D1:0".into(), "D1:2".into()],
            others: 0,
            ms: 1.0,
        };
        let scores = score(&[conversation], &[ranking]);
        assert_eq!(scores.recall["R@1"], 0.5);
        assert_eq!(scores.recall["R@5"], 1.0);
        // D1:0 alone is 2,000 tokens: packing stops there (as the kit does).
        assert_eq!(scores.recall["R@2000tok"], 0.5);
    }

    #[test]
    fn bm25_prefers_rare_shared_words() {
        let turn = |id: &str, text: &str| Turn {
            id: id.into(),
            speaker: "A".into(),
            session: 1,
            ts: DateTime::UNIX_EPOCH,
            text: text.into(),
            said: text.into(),
        };
        let conversation = Conversation {
            name: "c".into(),
            turns: vec![
                turn("D1:1", "A: I went to the support group"),
                turn("D1:2", "A: the weather went bad"),
                turn("D1:3", "A: the weather went fine"),
            ],
            questions: vec![Question {
                qid: "c/0".into(),
                question: "When did she go to the support group? weather".into(),
                evidence: vec!["D1:1".into()],
                category: 2,
            }],
        };
        let rankings = bm25_all(&[conversation]);
        assert_eq!(rankings[0].ranked[0], "D1:1");
    }
}
