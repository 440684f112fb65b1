//! `memd export` and `memd import`: a tenant's log (events and artifacts,
//! with their hashes) as one file, to move it to another database, keep it
//! as a backup, or audit it elsewhere.
//!
//! **The file** is NDJSON, gzip-compressed when its name ends in `.gz` (an
//! import reads either, by the first bytes): a `header` line (the tenant,
//! its event count and head hash), one `event` line per event in `seq`
//! order, each with every stored field and its `prev_hash` and `hash`, an
//! `artifact` line after the event that owns it (its bytes in base64), and
//! an `end` line repeating the count and head hash, so a file cut short is
//! told from a finished one. An event's `content` is written exactly as
//! PostgreSQL renders the stored `jsonb` (the text the hash covers), not
//! re-serialised, so every hash can be recomputed from the file alone.
//! Sealed content stays sealed: reading it in another database takes the
//! same key file.
//!
//! **Import** checks the whole file before it stores anything: every
//! event's `seq` follows the one before, its `prev_hash` is that event's
//! hash, and its hash is SHA-256 of its canonical form (the same check as
//! `memd verify`), every artifact's bytes hash to what its event recorded,
//! and the file ends with its `end` line. A file that fails is refused,
//! naming the first bad event, and nothing is stored. Then the events go in
//! with their hashes, `seq` and times unchanged, in transactions of
//! [`BATCH`] events that each move the tenant's head (and wake the
//! projectors), so the imported tenant's `verify` head is the exporter's.
//! **Resumable**: a tenant already holding the first N events of the file
//! (an import that was interrupted) goes on from event N + 1, once its head
//! hash is found equal to the file's event N; any other tenant of that name
//! is refused.

use std::{
    collections::HashMap,
    fs::File,
    io::{BufRead, BufReader, BufWriter, Read, Write},
    path::Path,
};

use anyhow::{Context, anyhow, bail, ensure};
use base64::Engine;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use memd_projectors::rebuild::Progress;

use crate::{domain::tenant::TenantId, write::NOTIFY_CHANNEL};

use memd_core::hash_chain::{ChainedEvent, GENESIS};

/// The header's `format`.
pub const FORMAT: &str = "memd-export";
/// The header's `version`: bump when a line's fields change.
pub const VERSION: u32 = 1;
/// Events read per page on export, and stored per transaction on import.
pub const BATCH: usize = 5_000;

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    r#type: String,
    format: String,
    version: u32,
    tenant: String,
    events: i64,
    head_hash: String,
    exported_at: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct EventLine {
    r#type: String,
    seq: i64,
    event_id: String,
    /// RFC 3339 with microseconds: what PostgreSQL stores, exactly.
    created_at: String,
    ts: String,
    session_id: String,
    channel: String,
    actor_type: String,
    actor_id: String,
    agent_id: Option<String>,
    /// Absent from files of memd versions before data subjects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    subject_id: Option<String>,
    kind: String,
    sensitivity: String,
    tags: Vec<String>,
    refs: Vec<String>,
    idempotency_key: Option<String>,
    artifact_id: Option<String>,
    prev_hash: String,
    hash: String,
    /// `content::text`, verbatim.
    content: Box<RawValue>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ArtifactLine {
    r#type: String,
    artifact_id: String,
    event_id: String,
    created_at: String,
    kind: String,
    media_type: String,
    sha256: String,
    /// Base64 (standard, padded).
    bytes: String,
    meta: Box<RawValue>,
}

#[derive(Debug, Serialize, Deserialize)]
struct End {
    r#type: String,
    events: i64,
    head_hash: String,
}

/// Only a line's `type`, read first (the rest is read by its own struct).
#[derive(Deserialize)]
struct Kind {
    r#type: String,
}

fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn parse_time(text: &str, what: &str) -> anyhow::Result<DateTime<Utc>> {
    Ok(DateTime::parse_from_rfc3339(text)
        .with_context(|| format!("{what} {text:?} is not an RFC 3339 time"))?
        .with_timezone(&Utc))
}

fn hash_from_hex(text: &str, what: &str) -> anyhow::Result<[u8; 32]> {
    hex::decode(text)
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or_else(|| anyhow!("{what} is not 32 bytes of hex"))
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    pub events: i64,
    pub artifacts: i64,
    pub head_hash: String,
}

/// Writes `tenant`'s log to `out` (gzip when its name ends in `.gz`),
/// reporting its progress after each page.
pub async fn export(
    pool: &PgPool,
    tenant: &TenantId,
    out: &Path,
    progress: &mut dyn FnMut(Progress<'_>),
) -> anyhow::Result<Exported> {
    // The head first: the file holds the log up to it, whatever is appended
    // while the export runs.
    let head: Option<(i64, Vec<u8>)> = sqlx::query!(
        "SELECT seq, hash FROM public.tenant_heads WHERE tenant_id = $1",
        tenant.as_str()
    )
    .fetch_optional(pool)
    .await?
    .map(|row| (row.seq, row.hash));
    let (head_seq, head_hash) = head.ok_or_else(|| anyhow!("no tenant {tenant}"))?;
    let mut writer = create_output(out)?;
    let mut line = |value: &dyn erased::Line| -> anyhow::Result<()> {
        value.write_to(&mut writer)?;
        writer.write_all(b"\n")?;
        Ok(())
    };
    line(&Header {
        r#type: "header".into(),
        format: FORMAT.into(),
        version: VERSION,
        tenant: tenant.to_string(),
        events: head_seq,
        head_hash: hex::encode(&head_hash),
        exported_at: time(Utc::now()),
    })?;
    let mut exported = Exported {
        events: 0,
        artifacts: 0,
        head_hash: hex::encode(GENESIS),
    };
    let mut after = 0_i64;
    while after < head_seq {
        let events = event_lines(pool, tenant, after, head_seq).await?;
        ensure!(
            !events.is_empty(),
            "the log of {tenant} ends before its head"
        );
        let owners: Vec<String> = events
            .iter()
            .filter_map(|e| e.artifact_id.clone())
            .collect();
        let mut artifacts = artifact_lines(pool, tenant, &owners).await?;
        for event in events {
            line(&event)?;
            if let Some(artifact) = event.artifact_id.as_ref().and_then(|a| artifacts.remove(a)) {
                line(&artifact)?;
                exported.artifacts += 1;
            }
            after = event.seq;
            exported.events += 1;
            exported.head_hash = event.hash;
        }
        progress(Progress {
            tenant: tenant.as_str(),
            done: after,
            total: head_seq,
        });
    }
    line(&End {
        r#type: "end".into(),
        events: exported.events,
        head_hash: exported.head_hash.clone(),
    })?;
    writer.flush()?;
    // A gzip stream is finished (its trailer written) when dropped.
    drop(writer);
    Ok(exported)
}

/// `out`, created, compressed with gzip when its name ends in `.gz`.
fn create_output(out: &Path) -> anyhow::Result<Box<dyn Write>> {
    let file = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    Ok(if out.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::write::GzEncoder::new(
            BufWriter::new(file),
            flate2::Compression::fast(),
        ))
    } else {
        Box::new(BufWriter::new(file))
    })
}

/// The lines of the events after `after`, up to `head_seq`, one page.
async fn event_lines(
    pool: &PgPool,
    tenant: &TenantId,
    after: i64,
    head_seq: i64,
) -> anyhow::Result<Vec<EventLine>> {
    let rows = sqlx::query!(
        r#"SELECT seq, event_id, created_at, ts, session_id, channel, actor_type, actor_id,
                  agent_id, subject_id, kind, sensitivity, tags, refs, idempotency_key,
                  artifact_id, prev_hash, hash, content::text AS "content!"
             FROM public.events
            WHERE tenant_id = $1 AND seq > $2 AND seq <= $3
            ORDER BY seq LIMIT $4"#,
        tenant.as_str(),
        after,
        head_seq,
        BATCH as i64
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(EventLine {
                r#type: "event".into(),
                seq: row.seq,
                event_id: row.event_id,
                created_at: time(row.created_at),
                ts: time(row.ts),
                session_id: row.session_id,
                channel: row.channel,
                actor_type: row.actor_type,
                actor_id: row.actor_id,
                agent_id: row.agent_id,
                subject_id: row.subject_id,
                kind: row.kind,
                sensitivity: row.sensitivity,
                tags: row.tags,
                refs: row.refs,
                idempotency_key: row.idempotency_key,
                artifact_id: row.artifact_id,
                prev_hash: hex::encode(row.prev_hash),
                hash: hex::encode(row.hash),
                content: RawValue::from_string(row.content)?,
            })
        })
        .collect()
}

async fn artifact_lines(
    pool: &PgPool,
    tenant: &TenantId,
    ids: &[String],
) -> anyhow::Result<HashMap<String, ArtifactLine>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query!(
        r#"SELECT artifact_id, event_id, created_at, kind, media_type, sha256, bytes,
                  meta::text AS "meta!"
             FROM public.artifacts WHERE tenant_id = $1 AND artifact_id = ANY ($2)"#,
        tenant.as_str(),
        ids
    )
    .fetch_all(pool)
    .await?;
    let mut lines = HashMap::new();
    for row in rows {
        lines.insert(
            row.artifact_id.clone(),
            ArtifactLine {
                r#type: "artifact".into(),
                artifact_id: row.artifact_id,
                event_id: row.event_id,
                created_at: time(row.created_at),
                kind: row.kind,
                media_type: row.media_type,
                sha256: hex::encode(row.sha256),
                bytes: base64::engine::general_purpose::STANDARD.encode(row.bytes),
                meta: RawValue::from_string(row.meta)?,
            },
        );
    }
    Ok(lines)
}

/// Serialising the line types through one closure.
mod erased {
    pub trait Line {
        fn write_to(&self, out: &mut dyn std::io::Write) -> serde_json::Result<()>;
    }
    impl<T: serde::Serialize> Line for T {
        fn write_to(&self, out: &mut dyn std::io::Write) -> serde_json::Result<()> {
            serde_json::to_writer(out, self)
        }
    }
}

/// The lines of an export file, gzip or plain (told by its first bytes).
fn lines(path: &Path) -> anyhow::Result<impl Iterator<Item = std::io::Result<String>>> {
    let mut file =
        BufReader::new(File::open(path).with_context(|| format!("opening {}", path.display()))?);
    let gzip = file.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    Ok(BufReader::new(reader).lines())
}

/// One event of the file, checked, ready to store.
struct Checked {
    line: EventLine,
    created_at: DateTime<Utc>,
    ts: DateTime<Utc>,
    hash: [u8; 32],
    prev_hash: [u8; 32],
    artifact: Option<ArtifactLine>,
}

/// Reads `path` line by line, checking the chain as it goes; calls
/// `each` with every event (and its artifact) in order. Errors name the
/// first line that does not hold.
fn read_checked(
    path: &Path,
    each: &mut dyn FnMut(&Header, Checked) -> anyhow::Result<()>,
) -> anyhow::Result<(Header, End)> {
    let mut lines = lines(path)?.enumerate();
    let (_, first) = lines.next().ok_or_else(|| anyhow!("the file is empty"))?;
    let (header, tenant) = read_header(&first?)?;
    let (mut last_seq, mut last_hash) = (0_i64, GENESIS);
    let mut pending: Option<Checked> = None;
    let mut recorded_digest: Option<(String, String)> = None;
    for (index, line) in lines {
        let number = index + 1;
        let text = line.with_context(|| format!("reading line {number}"))?;
        let kind: Kind = serde_json::from_str(&text)
            .with_context(|| format!("line {number} is not a JSON object with a type"))?;
        match kind.r#type.as_str() {
            "event" => {
                if let Some(done) = pending.take() {
                    each(&header, done)?;
                }
                let event: EventLine = serde_json::from_str(&text)
                    .with_context(|| format!("line {number}: not an event line"))?;
                let checked = check_event(&tenant, event, last_seq, &last_hash)?;
                (last_seq, last_hash) = (checked.line.seq, checked.hash);
                recorded_digest = checked.line.artifact_id.clone().map(|id| {
                    let recorded =
                        serde_json::from_str::<serde_json::Value>(checked.line.content.get())
                            .ok()
                            .and_then(|c| c["artifact_sha256"].as_str().map(str::to_owned))
                            .unwrap_or_default();
                    (id, recorded)
                });
                pending = Some(checked);
            }
            "artifact" => {
                let artifact: ArtifactLine = serde_json::from_str(&text)
                    .with_context(|| format!("line {number}: not an artifact line"))?;
                attach(number, artifact, pending.as_mut(), recorded_digest.as_ref())?;
            }
            "end" => {
                if let Some(done) = pending.take() {
                    ensure!(
                        done.line.artifact_id.is_none() || done.artifact.is_some(),
                        "event {} (seq {}) names artifact {} but the file does not hold it",
                        done.line.event_id,
                        done.line.seq,
                        done.line.artifact_id.as_deref().unwrap_or_default()
                    );
                    each(&header, done)?;
                }
                let end: End = serde_json::from_str(&text)
                    .with_context(|| format!("line {number}: not an end line"))?;
                ensure!(
                    end.events == last_seq && end.head_hash == hex::encode(last_hash),
                    "the end line says {} events ending in {}, the file holds {last_seq} ending in {}",
                    end.events,
                    end.head_hash,
                    hex::encode(last_hash)
                );
                ensure!(
                    end.events == header.events && end.head_hash == header.head_hash,
                    "the header says {} events ending in {}, the file holds {} ending in {}",
                    header.events,
                    header.head_hash,
                    end.events,
                    end.head_hash
                );
                return Ok((header, end));
            }
            other => bail!("line {number}: unknown line type {other:?}"),
        }
    }
    bail!("the file is cut short after seq {last_seq}: it has no end line")
}

/// The file's first line, checked: a header of this format and version,
/// naming a valid tenant.
fn read_header(first: &str) -> anyhow::Result<(Header, TenantId)> {
    let header: Header = serde_json::from_str(first).context("line 1 is not a header")?;
    ensure!(
        header.r#type == "header" && header.format == FORMAT,
        "line 1 is not a {FORMAT} header"
    );
    ensure!(
        header.version == VERSION,
        "the file is version {} of the format; this memd reads version {VERSION}",
        header.version
    );
    let tenant = TenantId::parse(&header.tenant)
        .map_err(|err| anyhow!("header tenant {:?}: {err}", header.tenant))?;
    Ok((header, tenant))
}

/// Gives the event read last (`pending`) its artifact, if the artifact
/// follows it and its bytes hash to what both the artifact line and the
/// event recorded (`recorded_digest`: the event's artifact id and digest).
fn attach(
    number: usize,
    artifact: ArtifactLine,
    pending: Option<&mut Checked>,
    recorded_digest: Option<&(String, String)>,
) -> anyhow::Result<()> {
    let owner = pending
        .filter(|p| p.line.event_id == artifact.event_id)
        .ok_or_else(|| {
            anyhow!(
                "line {number}: artifact {} does not follow its event {}",
                artifact.artifact_id,
                artifact.event_id
            )
        })?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&artifact.bytes)
        .with_context(|| format!("line {number}: artifact bytes are not base64"))?;
    let actual = hex::encode(Sha256::digest(&bytes));
    let recorded = recorded_digest
        .filter(|(id, _)| *id == artifact.artifact_id)
        .map(|(_, digest)| digest.as_str());
    ensure!(
        artifact.sha256 == actual && recorded == Some(actual.as_str()),
        "event {} (seq {}) does not verify: its artifact {} hashes to {actual}, the event recorded {}",
        owner.line.event_id,
        owner.line.seq,
        artifact.artifact_id,
        recorded.unwrap_or("no such artifact")
    );
    owner.artifact = Some(artifact);
    Ok(())
}

/// The event of `line`, if it extends the chain ending at (`last_seq`,
/// `last_hash`) of `tenant`.
fn check_event(
    tenant: &TenantId,
    line: EventLine,
    last_seq: i64,
    last_hash: &[u8; 32],
) -> anyhow::Result<Checked> {
    let bad = |reason: String| {
        anyhow!(
            "event {} (seq {}) does not verify: {reason}",
            line.event_id,
            line.seq
        )
    };
    if line.seq != last_seq + 1 {
        return Err(bad(format!("expected seq {}", last_seq + 1)));
    }
    let prev_hash = hash_from_hex(&line.prev_hash, "prev_hash").map_err(|e| bad(e.to_string()))?;
    if &prev_hash != last_hash {
        return Err(bad(format!(
            "its prev_hash is not the previous event's hash {}",
            hex::encode(last_hash)
        )));
    }
    let hash = hash_from_hex(&line.hash, "hash").map_err(|e| bad(e.to_string()))?;
    let created_at = parse_time(&line.created_at, "created_at").map_err(|e| bad(e.to_string()))?;
    let ts = parse_time(&line.ts, "ts").map_err(|e| bad(e.to_string()))?;
    let recomputed = ChainedEvent {
        tenant_id: tenant.as_str(),
        seq: line.seq,
        event_id: &line.event_id,
        created_at_us: created_at.timestamp_micros(),
        ts_us: ts.timestamp_micros(),
        session_id: &line.session_id,
        channel: &line.channel,
        actor_type: &line.actor_type,
        actor_id: &line.actor_id,
        agent_id: line.agent_id.as_deref(),
        subject_id: line.subject_id.as_deref(),
        kind: &line.kind,
        sensitivity: &line.sensitivity,
        tags: &line.tags,
        refs: &line.refs,
        idempotency_key: line.idempotency_key.as_deref(),
        artifact_id: line.artifact_id.as_deref(),
        content_text: line.content.get(),
    }
    .hash(last_hash);
    if recomputed != hash {
        return Err(bad(format!(
            "its hash {} is not the hash of its fields ({}): the event was altered",
            line.hash,
            hex::encode(recomputed)
        )));
    }
    Ok(Checked {
        line,
        created_at,
        ts,
        hash,
        prev_hash,
        artifact: None,
    })
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub tenant: String,
    /// Events the tenant held before (a resumed import), and stored now.
    pub already: i64,
    pub stored: i64,
    pub head_hash: String,
    /// Whether the tenant was created by this import (it has no token yet).
    pub created: bool,
}

/// Checks `path` whole, then stores its events (see the module's comment),
/// reporting its progress after each transaction.
pub async fn import(
    pool: &PgPool,
    path: &Path,
    progress: &mut (dyn FnMut(Progress<'_>) + Send),
) -> anyhow::Result<Imported> {
    // Pass 1: the whole file verifies, or nothing is stored. The chain is
    // checked on a thread as the file is read; PostgreSQL checks that each
    // content is as it renders stored `jsonb` (the text the hash covers,
    // and what the content will read back as once stored).
    let (contents, mut to_check) = tokio::sync::mpsc::channel::<Vec<(i64, String, String)>>(2);
    let file = path.to_owned();
    let reader = tokio::task::spawn_blocking(move || {
        let mut batches = Batches::new(contents);
        let read = read_checked(&file, &mut |_, event| {
            batches.push((
                event.line.seq,
                event.line.event_id,
                event.line.content.get().to_owned(),
            ))
        })?;
        batches.finish()?;
        anyhow::Ok(read)
    });
    while let Some(batch) = to_check.recv().await {
        if let Err(err) = check_rendering(pool, &batch).await {
            drop(to_check);
            let _ = reader.await;
            return Err(err);
        }
    }
    let (header, _) = reader.await??;
    let tenant = TenantId::parse(&header.tenant).map_err(|err| anyhow!("{err}"))?;
    let created = crate::tenants::ensure_tenant(pool, &tenant).await?;
    let held = sqlx::query!(
        "SELECT seq, hash FROM public.tenant_heads WHERE tenant_id = $1",
        tenant.as_str()
    )
    .fetch_one(pool)
    .await?;
    let (already, held_hash) = (held.seq, held.hash);
    ensure!(
        already <= header.events,
        "the tenant {tenant} holds {already} events here, more than the file's {}",
        header.events
    );
    // Pass 2: a thread reads the file again and hands over batches of what
    // the tenant does not hold yet; each is stored in a transaction.
    let (to_store, mut received) = tokio::sync::mpsc::channel::<Vec<Checked>>(2);
    let (file, reader_tenant) = (path.to_owned(), tenant.clone());
    let held = hex::encode(&held_hash);
    let reader = tokio::task::spawn_blocking(move || {
        let mut batches = Batches::new(to_store);
        let mut prefix_checked = already == 0;
        read_checked(&file, &mut |_, event| {
            if event.line.seq <= already {
                if event.line.seq == already {
                    ensure!(
                        event.line.hash == held,
                        "the tenant {reader_tenant} here is not a beginning of the file: at seq \
                         {already} its head hash is {held}, the file's is {}",
                        event.line.hash
                    );
                    prefix_checked = true;
                }
                return Ok(());
            }
            batches.push(event)
        })?;
        ensure!(prefix_checked, "the file holds no event at seq {already}");
        batches.finish()
    });
    let mut stored = 0_i64;
    while let Some(batch) = received.recv().await {
        stored += store(pool, &tenant, &batch).await?;
        progress(Progress {
            tenant: tenant.as_str(),
            done: already + stored,
            total: header.events,
        });
    }
    reader.await??;
    progress(Progress {
        tenant: tenant.as_str(),
        done: already + stored,
        total: header.events,
    });
    Ok(Imported {
        tenant: tenant.to_string(),
        already,
        stored,
        head_hash: header.head_hash,
        created,
    })
}

/// Fails on the first of `batch`'s `(seq, event_id, content)` whose
/// content is not exactly as PostgreSQL renders it once stored as `jsonb`.
async fn check_rendering(pool: &PgPool, batch: &[(i64, String, String)]) -> anyhow::Result<()> {
    let texts: Vec<&str> = batch.iter().map(|(_, _, text)| text.as_str()).collect();
    let first: Option<i64> = sqlx::query_scalar!(
        "SELECT min(u.o) FROM unnest($1::text[]) WITH ORDINALITY AS u (t, o)
          WHERE u.t::jsonb::text <> u.t",
        &texts as &[&str]
    )
    .fetch_one(pool)
    .await?;
    if let Some(index) = first {
        let (seq, event_id, _) = &batch[index as usize - 1];
        bail!(
            "event {event_id} (seq {seq}) does not verify: its content is not written as \
             PostgreSQL stores it, so its hash could not be checked again once imported"
        );
    }
    Ok(())
}

/// Stores `batch` in one transaction that moves the tenant's head from the
/// batch's first `prev_hash` to its last `hash` (refused if the head moved:
/// something else appended meanwhile) and wakes the projectors. Content and
/// metadata go in as the file's text, cast to `jsonb` by PostgreSQL, so
/// they render as they did where they were exported (and hash the same).
/// The batch's events and artifacts as JSON records, the rows
/// `jsonb_to_recordset` reads in [`store`].
fn records(batch: &[Checked]) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let rows: Vec<serde_json::Value> = batch
        .iter()
        .map(|e| {
            serde_json::json!({
                "seq": e.line.seq, "event_id": e.line.event_id,
                "created_at": e.created_at, "ts": e.ts,
                "session_id": e.line.session_id, "channel": e.line.channel,
                "actor_type": e.line.actor_type, "actor_id": e.line.actor_id,
                "agent_id": e.line.agent_id, "subject_id": e.line.subject_id,
                "kind": e.line.kind,
                "sensitivity": e.line.sensitivity, "tags": e.line.tags, "refs": e.line.refs,
                "idempotency_key": e.line.idempotency_key, "artifact_id": e.line.artifact_id,
                "prev_hash": hex::encode(e.prev_hash), "hash": hex::encode(e.hash),
                "content": e.line.content.get(),
            })
        })
        .collect();
    let artifacts: Vec<serde_json::Value> = batch
        .iter()
        .filter_map(|e| e.artifact.as_ref())
        .map(|a| {
            serde_json::json!({
                "artifact_id": a.artifact_id, "event_id": a.event_id,
                "created_at": a.created_at, "kind": a.kind, "media_type": a.media_type,
                "sha256": a.sha256, "bytes": a.bytes, "meta": a.meta.get(),
            })
        })
        .collect();
    (rows, artifacts)
}

async fn store(pool: &PgPool, tenant: &TenantId, batch: &[Checked]) -> anyhow::Result<i64> {
    let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
        return Ok(0);
    };
    let (rows, artifacts) = records(batch);
    let mut tx = memd_projectors::transaction::begin(pool).await?;
    // The ages' anchor (as appends keep it): a row dated after it was
    // recorded does not count.
    let newest_ts = batch
        .iter()
        .filter(|e| e.ts <= e.created_at)
        .map(|e| e.ts)
        .max();
    let moved = sqlx::query!(
        "UPDATE public.tenant_heads SET seq = $2, hash = $3, created_at = $4,
                newest_ts = greatest(newest_ts, $7)
          WHERE tenant_id = $1 AND seq = $5 AND hash = $6",
        tenant.as_str(),
        last.line.seq,
        last.hash.as_slice(),
        last.created_at,
        first.line.seq - 1,
        first.prev_hash.as_slice(),
        newest_ts
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    ensure!(
        moved == 1,
        "the tenant {tenant}'s log moved while importing (something else appends to it)"
    );
    sqlx::query!(
        "INSERT INTO public.events (tenant_id, seq, event_id, created_at, ts, session_id,
                channel, actor_type, actor_id, agent_id, subject_id, kind, sensitivity, tags,
                refs, idempotency_key, artifact_id, prev_hash, hash, content)
         SELECT $1, r.seq, r.event_id, r.created_at, r.ts, r.session_id, r.channel,
                r.actor_type, r.actor_id, r.agent_id, r.subject_id, r.kind, r.sensitivity,
                r.tags, r.refs,
                r.idempotency_key, r.artifact_id, decode(r.prev_hash, 'hex'),
                decode(r.hash, 'hex'), r.content::jsonb
           FROM jsonb_to_recordset($2) AS r (seq bigint, event_id text,
                created_at timestamptz, ts timestamptz, session_id text, channel text,
                actor_type text, actor_id text, agent_id text, subject_id text, kind text,
                sensitivity text,
                tags text[], refs text[], idempotency_key text, artifact_id text,
                prev_hash text, hash text, content text)",
        tenant.as_str(),
        serde_json::Value::Array(rows)
    )
    .execute(&mut *tx)
    .await?;
    if !artifacts.is_empty() {
        sqlx::query!(
            "INSERT INTO public.artifacts (artifact_id, tenant_id, event_id, created_at, kind,
                    media_type, sha256, bytes, meta)
             SELECT r.artifact_id, $1, r.event_id, r.created_at, r.kind, r.media_type,
                    decode(r.sha256, 'hex'), decode(r.bytes, 'base64'), r.meta::jsonb
               FROM jsonb_to_recordset($2) AS r (artifact_id text, event_id text,
                    created_at timestamptz, kind text, media_type text, sha256 text,
                    bytes text, meta text)",
            tenant.as_str(),
            serde_json::Value::Array(artifacts)
        )
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query!(
        "SELECT pg_notify($1, $2)",
        NOTIFY_CHANNEL,
        format!("{tenant}:{}", last.line.seq)
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(batch.len() as i64)
}

/// Events appended per transaction by a foreign import.
pub const FOREIGN_BATCH: usize = 500;

/// What a foreign import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignImported {
    pub events: i64,
    /// Appended now, and found already stored (their idempotency keys).
    pub stored: i64,
    pub replayed: i64,
    pub created: bool,
}

/// Imports history from elsewhere: `path` (NDJSON, gzip or plain) holds one
/// event per line in the append envelope (`POST /api/v1/events`'s body),
/// without hashes. Every line is parsed and checked first (a bad one is
/// refused by line and field, and nothing is stored); then the events go
/// through the write path as any append does (redaction, sealing, the hash
/// chain) in batches of [`FOREIGN_BATCH`]. A line without an
/// `idempotency_key` gets one derived from the file: `import:` + the first
/// 32 hex digits of the line's SHA-256 + `:` + how many identical lines came
/// before it, so a re-run (after an interruption, or of the same file)
/// stores nothing twice, and editing one line leaves the others' keys as
/// they were.
pub async fn import_foreign(
    pool: &PgPool,
    keyring: &memd_core::seal::Keyring,
    redactor: std::sync::Arc<crate::domain::redact::Redactor>,
    tenant: &TenantId,
    path: &Path,
    progress: &mut (dyn FnMut(Progress<'_>) + Send),
) -> anyhow::Result<ForeignImported> {
    let owner = tenant.clone();
    let parse_all = move |path: &Path| -> anyhow::Result<Vec<crate::domain::event::NewEvent>> {
        let tenant = &owner;
        let mut events = Vec::new();
        let mut seen: HashMap<[u8; 32], u32> = HashMap::new();
        for (index, line) in lines(path)?.enumerate() {
            let number = index + 1;
            let text = line.with_context(|| format!("reading line {number}"))?;
            if text.trim().is_empty() {
                continue;
            }
            let mut value: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("line {number} is not JSON"))?;
            let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
            let occurrence = seen.entry(digest).or_insert(0);
            if let Some(map) = value.as_object_mut()
                && !map.contains_key("idempotency_key")
            {
                map.insert(
                    "idempotency_key".into(),
                    format!("import:{}:{occurrence}", &hex::encode(digest)[..32]).into(),
                );
            }
            *occurrence += 1;
            let request: crate::domain::event::EventRequest = crate::domain::parse_json("", value)
                .map_err(|err| anyhow!("line {number}: {}: {}", err.field, err.message))?;
            if let Some(claimed) = &request.tenant_id {
                ensure!(
                    claimed == tenant.as_str(),
                    "line {number}: tenant_id {claimed:?} is not {tenant}"
                );
            }
            let event = crate::domain::event::NewEvent::parse(request, &redactor)
                .map_err(|err| anyhow!("line {number}: {}: {}", err.field, err.message))?;
            events.push(event);
        }
        Ok(events)
    };
    let file = path.to_owned();
    let events = tokio::task::spawn_blocking(move || parse_all(&file)).await??;
    let created = crate::tenants::ensure_tenant(pool, tenant).await?;
    let total = events.len() as i64;
    let mut report = ForeignImported {
        events: total,
        stored: 0,
        replayed: 0,
        created,
    };
    let mut events = events.into_iter().peekable();
    while events.peek().is_some() {
        let batch: Vec<_> = events.by_ref().take(FOREIGN_BATCH).collect();
        let appended = crate::write::append(pool, keyring, tenant, batch)
            .await
            .map_err(|err| anyhow!("appending: {err}"))?;
        let replayed = appended.iter().filter(|a| a.replayed).count() as i64;
        report.replayed += replayed;
        report.stored += appended.len() as i64 - replayed;
        progress(Progress {
            tenant: tenant.as_str(),
            done: report.stored + report.replayed,
            total,
        });
    }
    progress(Progress {
        tenant: tenant.as_str(),
        done: total,
        total,
    });
    Ok(report)
}

/// Items gathered on the thread that reads a file into batches of [`BATCH`]
/// for the task that checks or stores them.
struct Batches<T> {
    batch: Vec<T>,
    to: tokio::sync::mpsc::Sender<Vec<T>>,
}

impl<T> Batches<T> {
    fn new(to: tokio::sync::mpsc::Sender<Vec<T>>) -> Self {
        Self {
            batch: Vec::with_capacity(BATCH),
            to,
        }
    }

    fn push(&mut self, item: T) -> anyhow::Result<()> {
        self.batch.push(item);
        if self.batch.len() == BATCH {
            let full = std::mem::take(&mut self.batch);
            self.send(full)?;
        }
        Ok(())
    }

    /// Sends what is left.
    fn finish(mut self) -> anyhow::Result<()> {
        if !self.batch.is_empty() {
            let rest = std::mem::take(&mut self.batch);
            self.send(rest)?;
        }
        Ok(())
    }

    fn send(&self, batch: Vec<T>) -> anyhow::Result<()> {
        self.to
            .blocking_send(batch)
            .map_err(|_| anyhow!("the import stopped"))
    }
}
