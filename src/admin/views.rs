//! Views as files a person can read and edit (P6): `memd views export DIR`
//! writes each view of a tenant as `DIR/<view>.md`; `memd views import DIR`
//! appends a `view_update` event for every file whose text differs from the
//! view's latest text in the log. Edits go through the log like any other
//! write (redacted, hash-chained), so the projection, rebuilds and audits
//! all see them.

use std::path::{Path, PathBuf};

use anyhow::Context;
use memd_core::{content::Content, event::Kind, seal::Keyring};
use serde_json::json;
use sqlx::PgPool;

use crate::{
    domain::{
        event::{EventRequest, NewEvent},
        redact::Redactor,
        tenant::TenantId,
    },
    write,
};

const EXTENSION: &str = "md";

#[derive(Debug)]
pub struct Exported {
    pub view: String,
    pub path: PathBuf,
    pub event_id: String,
}

/// Writes the tenant's projected views into `dir` (created if missing): the
/// shared versions, which people curate (an agent's own versions are its
/// memory, not the tenant's documents).
pub async fn export(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &TenantId,
    dir: &Path,
) -> anyhow::Result<Vec<Exported>> {
    let views = sqlx::query!(
        "SELECT view, text, event_id FROM projections.views
          WHERE tenant_id = $1 AND owner = '' ORDER BY view",
        tenant.as_str()
    )
    .fetch_all(pool)
    .await?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut exported = Vec::with_capacity(views.len());
    for (view, mut text, event_id) in views
        .into_iter()
        .map(|row| (row.view, row.text, row.event_id))
    {
        keyring
            .open_in_place(tenant.as_str(), &mut text)
            .with_context(|| format!("view {view}"))?;
        let path = dir.join(format!("{view}.{EXTENSION}"));
        std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
        exported.push(Exported {
            view,
            path,
            event_id,
        });
    }
    Ok(exported)
}

#[derive(Debug, PartialEq, Eq)]
pub enum Imported {
    Unchanged { view: String },
    Updated { view: String, event_id: String },
}

/// Appends a `view_update` for every `DIR/<view>.md` whose text differs
/// from the view's latest text in the log, as `actor` (a human). A new view
/// is private; an edited one keeps the channel and sensitivity it had.
pub async fn import(
    pool: &PgPool,
    keyring: &Keyring,
    redactor: &Redactor,
    tenant: &TenantId,
    dir: &Path,
    actor: &str,
) -> anyhow::Result<Vec<Imported>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == EXTENSION))
        .collect();
    files.sort();
    let mut results = Vec::with_capacity(files.len());
    for path in files {
        let view = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .with_context(|| format!("{}: file name is not UTF-8", path.display()))?
            .to_owned();
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let latest = latest_update(pool, keyring, tenant, &view).await?;
        let (channel, sensitivity) = match &latest {
            // `secret` there is a secret redaction found: it finds it again
            // (sent as secret, the text would be replaced by a marker).
            Some((_, channel, sensitivity)) if sensitivity == "secret" => {
                (channel.clone(), "none".to_owned())
            }
            Some((_, channel, sensitivity)) => (channel.clone(), sensitivity.clone()),
            None => ("private".to_owned(), "none".to_owned()),
        };
        let request: EventRequest = serde_json::from_value(json!({
            "session_id": "views-import",
            "channel": channel,
            "actor": {"type": "human", "id": actor},
            "kind": "view_update",
            "sensitivity": sensitivity,
            "content": {"view": view, "text": text},
        }))?;
        let event = NewEvent::parse(request, redactor)
            .map_err(|err| anyhow::anyhow!("{}: {} {}", path.display(), err.field, err.message))?;
        // Compared after redaction: a file holding a secret would otherwise
        // differ from its stored, redacted text forever.
        let stored = match Content::read(Kind::ViewUpdate, &event.content) {
            Content::ViewUpdate(update) => update.text,
            _ => None,
        };
        let unchanged = latest
            .as_ref()
            .is_some_and(|(current, _, _)| stored == Some(current.as_str()));
        if unchanged {
            results.push(Imported::Unchanged { view });
            continue;
        }
        let appended = write::append(pool, keyring, tenant, vec![event]).await?;
        results.push(Imported::Updated {
            view,
            event_id: appended[0].event_id.clone(),
        });
    }
    Ok(results)
}

/// The text, channel and sensitivity of `view`'s latest update in the log.
/// A sealed update names its view only inside its sealed content, so the
/// tenant's updates are opened newest first until one is `view`'s (views
/// are few and rarely edited).
async fn latest_update(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &TenantId,
    view: &str,
) -> anyhow::Result<Option<(String, String, String)>> {
    let updates: Vec<(serde_json::Value, String, String, Option<String>)> = sqlx::query!(
        "SELECT content, channel, sensitivity, subject_id FROM events
          WHERE tenant_id = $1 AND kind = 'view_update'
            AND (content->>'view' = $2 OR content ? 'sealed')
          ORDER BY seq DESC",
        tenant.as_str(),
        view
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|row| (row.content, row.channel, row.sensitivity, row.subject_id))
    .collect();
    let keyring = memd_core::event::subject_keyring(
        pool,
        keyring,
        tenant.as_str(),
        updates.iter().filter_map(|u| u.3.as_deref()),
    )
    .await?;
    for (mut content, channel, sensitivity, subject) in updates {
        let opened = keyring
            .open_event_content(tenant.as_str(), &mut content, subject.is_some())
            .with_context(|| format!("a sealed update of view {view}"))?;
        // An erased subject's update is gone: the view is what came before.
        if opened == memd_core::seal::Opened::Erased {
            continue;
        }
        if let Content::ViewUpdate(update) = Content::read(Kind::ViewUpdate, &content)
            && update.view == Some(view)
        {
            let text = update.text.unwrap_or_default().to_owned();
            return Ok(Some((text, channel, sensitivity)));
        }
    }
    Ok(None)
}
