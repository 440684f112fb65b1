//! Liveness and readiness for supervisors and load balancers.

use axum::{Json, extract::State, http::StatusCode};
use serde_json::{Value, json};

use super::ApiState;

/// The process is up and serving.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The daemon can reach its database, so requests can succeed.
pub async fn readyz(State(state): State<ApiState>) -> (StatusCode, Json<Value>) {
    match sqlx::query("SELECT 1").execute(&state.pool).await {
        Ok(_) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "unavailable", "reason": "database unreachable"})),
            )
        }
    }
}
