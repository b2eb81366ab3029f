//! Request bodies and queries parsed with errors that name the field, as JSON.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::error::ApiError;

/// The largest request body accepted.
pub const MAX_BODY: usize = 1 << 20;

/// A JSON body; unknown fields, wrong types and bad amounts are 400s naming the field.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    format!("the body is larger than {MAX_BODY} bytes"),
                )
            } else {
                ApiError::bad_request(format!("unreadable body: {e}"))
            }
        })?;
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let field = if path == "." || path == "?" {
                "body".to_string()
            } else {
                path
            };
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                format!("{field}: {inner}"),
            )
            .with_details(json!({"field": field}))
        })?;
        de.end().map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                format!("body: {e}"),
            )
        })?;
        Ok(Body(value))
    }
}

/// Query parameters; a bad one is a 400 naming it.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        serde_urlencoded::from_str(query).map(Query).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                format!("query: {e}"),
            )
        })
    }
}
