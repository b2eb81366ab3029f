//! API errors: corral-api's `{"error": {"code", "message", "details"}}` with the right HTTP
//! status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use corral_api::{ErrorBody, ErrorDetail};
use corral_store::StoreError;
use serde_json::{json, Value};

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Value,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            details: Value::Null,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// A field that parsed but makes no sense; names the field.
    pub fn invalid(field: &str, message: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            format!("{field}: {message}"),
        )
        .with_details(json!({"field": field}))
    }

    pub fn not_found(what: &str, id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} {id:?} not found"),
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid token is required: Authorization: Bearer <token>",
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// The database did not answer (`why`): nothing was written, and the same request may go
    /// through in a moment (503 with `Retry-After`).
    pub fn store_unavailable(why: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %why, "the store is unavailable");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("the database is unavailable ({why}); try again in {STORE_RETRY_SECS} s"),
        )
        .with_details(json!({"retry_after_secs": STORE_RETRY_SECS}))
    }
}

/// What a 503 of an unavailable store tells clients to wait (`Retry-After`).
const STORE_RETRY_SECS: u64 = 2;

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::NotFound { what, id } => ApiError::not_found(what, id),
            StoreError::Conflict { .. } => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
            StoreError::Refused(_) => ApiError::new(StatusCode::CONFLICT, "refused", e.to_string()),
            // Nothing was written: the same request may go through in a moment.
            _ if e.is_unavailable() => ApiError::store_unavailable(&e),
            _ => {
                tracing::error!(error = %e, "store failure");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the store failed; see the manager's log",
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    /// The body; a `retry_after_secs` in the details is also the `Retry-After` header.
    fn into_response(self) -> Response {
        let retry_after = self.details.get("retry_after_secs").and_then(Value::as_u64);
        let body = ErrorBody {
            error: ErrorDetail {
                code: Some(self.code.to_string()),
                message: self.message,
                details: Some(self.details),
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}
