//! JSON merge patch (RFC 7396): [`merge`], a pure function over JSON values, and
//! [`MergePatch`], the body of a PATCH request, which names the fields to change: null removes
//! a field (so it takes its default), an object merges field by field, anything else replaces.

use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::extract::Body;

/// The media type of a merge patch; `application/json` is taken too.
pub const MEDIA_TYPE: &str = "application/merge-patch+json";

/// Applies `patch` to `target` as RFC 7396 says: an object merges key by key (a null removes
/// the key, an object merges into the value there, anything else replaces it); any other patch
/// replaces the whole target.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(fields) = target {
        for (key, value) in patch {
            if value.is_null() {
                fields.remove(key);
            } else {
                merge(fields.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// A merge patch body: a JSON object, sent as `application/merge-patch+json` or
/// `application/json` (another type is a 415 naming those two; an unreadable body a 400 as
/// [`Body`] says it).
pub struct MergePatch(pub Map<String, Value>);

impl<S: Send + Sync> FromRequest<S> for MergePatch {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        if let Some(given) = req.headers().get(CONTENT_TYPE) {
            if !is_patch_type(given.to_str().unwrap_or_default()) {
                let error = ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    format!(
                        "a PATCH body is a JSON merge patch (RFC 7396), sent as {MEDIA_TYPE} or \
                         application/json, not {:?}",
                        String::from_utf8_lossy(given.as_bytes())
                    ),
                )
                .with_details(json!({"field": "content-type"}));
                return Err(([("accept-patch", MEDIA_TYPE)], error).into_response());
            }
        }
        let Body(value) = Body::<Value>::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        match value {
            Value::Object(fields) => Ok(MergePatch(fields)),
            other => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                format!(
                    "body: a merge patch is a JSON object of the fields to change, not {}",
                    kind(&other)
                ),
            )
            .with_details(json!({"field": "body"}))
            .into_response()),
        }
    }
}

/// Whether a `Content-Type` is a merge patch's: its media type, parameters aside, ignoring case.
fn is_patch_type(content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    media.eq_ignore_ascii_case(MEDIA_TYPE) || media.eq_ignore_ascii_case("application/json")
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7396, appendix A: every example.
    #[test]
    fn the_rfc_examples_hold() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (target, patch, want) in cases {
            let mut got = target.clone();
            merge(&mut got, &patch);
            assert_eq!(got, want, "{target} patched with {patch}");
        }
    }

    #[test]
    fn a_patch_comes_as_a_merge_patch_or_as_json() {
        for ok in [
            "application/merge-patch+json",
            "application/json",
            "Application/JSON; charset=utf-8",
            " application/merge-patch+json ;charset=UTF-8",
        ] {
            assert!(is_patch_type(ok), "{ok}");
        }
        for refused in [
            "application/json-patch+json",
            "text/plain",
            "application/x-www-form-urlencoded",
            "",
        ] {
            assert!(!is_patch_type(refused), "{refused}");
        }
    }
}
