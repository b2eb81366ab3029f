//! `GET /api/v1/health`: whether the store takes writes, which is what the manager needs to do
//! anything (a manager whose store is full or locked answers every write with 500).

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tokio::time::Instant;

use crate::{now, App};

/// A store that has not taken the check's write by then is as good as unavailable.
const TIMEOUT: Duration = Duration::from_secs(5);
/// A success is reused this long: the check commits a write, and the route needs no token.
const REUSE_OK: Duration = Duration::from_secs(1);

/// The last check: when it ended, and its result.
#[derive(Default)]
pub(crate) struct Health {
    last: tokio::sync::Mutex<Option<(Instant, Result<(), String>)>>,
}

impl Health {
    /// Checks the store, once for callers that arrive together; a failure is checked again
    /// at the next call, so a store that recovers shows it at once.
    async fn check(&self, app: &App) -> Result<(), String> {
        let asked = Instant::now();
        let mut last = self.last.lock().await;
        if let Some((at, result)) = &*last {
            if *at >= asked || (result.is_ok() && at.elapsed() < REUSE_OK) {
                return result.clone();
            }
        }
        let result = match tokio::time::timeout(TIMEOUT, app.store.check_writable(now())).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("the store cannot write: {e}")),
            Err(_) => Err(format!(
                "the store took no write within {} s (locked, or overloaded)",
                TIMEOUT.as_secs()
            )),
        };
        if let Err(reason) = &result {
            tracing::warn!(reason, "health check failed");
        }
        *last = Some((Instant::now(), result.clone()));
        result
    }
}

/// 200 `{"status": "ok"}`, or 503 `{"status": "unavailable", "reason": ...}`.
pub(crate) async fn health(app: &App) -> Response {
    match app.health.check(app).await {
        Ok(()) => Json(json!({"status": "ok"})).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "reason": reason})),
        )
            .into_response(),
    }
}
