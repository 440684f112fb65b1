//! Liveness and readiness for supervisors and load balancers.

use axum::{Json, extract::State, http::StatusCode};
use serde::Serialize;

use super::ApiState;
use crate::read::semantic::SemanticStatus;

#[derive(Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok` (healthz); `ready` or `unavailable` (readyz).
    status: &'static str,
    /// Why the daemon is not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    /// readyz: whether bundles retrieve by meaning, and if not, why and
    /// what command turns it on. Off is still ready: bundles then use
    /// lexical retrieval.
    #[serde(skip_serializing_if = "Option::is_none")]
    semantic: Option<SemanticStatus>,
    /// readyz: whether high and secret memory is sealed at rest.
    #[serde(skip_serializing_if = "Option::is_none")]
    encryption_at_rest: Option<EncryptionStatus>,
    /// readyz: tenants whose log the checkpoint signer refused to sign
    /// (it no longer extends their newest signed checkpoint: a rewritten
    /// log), with the reason. The daemon still serves; an operator must
    /// look (`memd verify --checkpoint` with the checkpoints kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    refused_checkpoints: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct EncryptionStatus {
    enabled: bool,
    /// The key's public name (a hash of it), as sealed values carry it.
    #[serde(skip_serializing_if = "Option::is_none")]
    key_id: Option<String>,
    /// When off: what turns it on.
    #[serde(skip_serializing_if = "Option::is_none")]
    how_to_enable: Option<&'static str>,
}

impl EncryptionStatus {
    fn of(state: &ApiState) -> Self {
        let key_id = state.reader.keyring.key_id().map(str::to_owned);
        Self {
            enabled: key_id.is_some(),
            how_to_enable: key_id.is_none().then_some(
                "memd key generate --out FILE, then start memd with --key-file FILE (MEMD_KEY_FILE)",
            ),
            key_id,
        }
    }
}

/// Liveness
///
/// The process is up and serving. No token needed.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses((status = 200, description = "Serving", body = Health,
        example = json!({"status": "ok"}))),
)]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        reason: None,
        semantic: None,
        encryption_at_rest: None,
        refused_checkpoints: None,
    })
}

/// The tenants the signer refused, when any.
fn refused(state: &ApiState) -> Option<std::collections::BTreeMap<String, String>> {
    let refused = state.metrics.refused_logs();
    (!refused.is_empty()).then(|| refused.into_iter().collect())
}

/// Readiness
///
/// The daemon can reach its database and write to it, so requests can
/// succeed (a read-only server, such as a standby or a leader being
/// demoted in a failover, is not ready). Also says
/// whether semantic retrieval is on (`semantic`) and whether high and
/// secret memory is sealed at rest (`encryption_at_rest`). No token needed.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses(
        (status = 200, description = "Ready", body = Health, example = json!({"status": "ready", "semantic": {"enabled": true, "default_embedder": "minilm", "loaded": ["hashed", "minilm"]}, "encryption_at_rest": {"enabled": true, "key_id": "3164d4e383716c82"}})),
        (status = 503, description = "The database cannot be reached, or is read-only (`reason`)", body = Health,
            example = json!({"status": "unavailable", "reason": "database unreachable"})),
    ),
)]
pub async fn readyz(State(state): State<ApiState>) -> (StatusCode, Json<Health>) {
    let reason = match crate::db::writable(&state.pool).await {
        Ok(true) => None,
        // A standby, or a leader being demoted in a failover: appends
        // would fail until the new leader is reached.
        Ok(false) => Some("database read-only"),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check failed");
            Some("database unreachable")
        }
    };
    let status = if reason.is_none() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(Health {
            status: if reason.is_none() {
                "ready"
            } else {
                "unavailable"
            },
            reason,
            semantic: Some(state.reader.semantic.status()),
            encryption_at_rest: Some(EncryptionStatus::of(&state)),
            refused_checkpoints: refused(&state),
        }),
    )
}
