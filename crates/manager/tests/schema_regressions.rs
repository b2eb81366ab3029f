//! Requests schemathesis (.ci/schemathesis.sh) found the server and openapi.json disagreeing
//! on, or answered with a 5xx: each is kept here as the request that showed it.

mod common;

use common::{hello_in_the_log, scheduled_session, Manager};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// JSON Schema's `integer` takes `34967.0`; so does every integer field of the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integral_floats_are_integers() {
    let m = Manager::start(None).await;
    let r = m.post("/api/v1/groups", r#"{"name": "g"}"#).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = m
        .post(
            "/api/v1/groups/g/bootstrap-tokens",
            r#"{"ttl_secs": 82432.0}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = m
        .put(
            "/api/v1/groups/g/templates",
            r#"[{"name": "small", "slots": {"cpu": 2.0, "gpu": 0.5}, "max": 45230.0, "price": 1.0}]"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body[0]["max"], 45230);
    assert_eq!(r.body[0]["slots"], json!({"cpu": "2", "gpu": "0.5"}));
    let r = m
        .put(
            "/api/v1/groups/g/policy",
            r#"{"policy": {"min_nodes": 1e0, "max_nodes": 3.0, "cooldown_secs": 1513.0}}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["policy"]["max_nodes"], 3);
    let r = m
        .put(
            "/api/v1/groups/g/provider",
            r#"{"name": "static", "launch": {"budget": 3791.0, "max_provisioning_secs": 8800.0}}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["launch"]["budget"], 3791);
    // A fraction is still no integer, and the error names the field.
    let r = m
        .post("/api/v1/groups/g/bootstrap-tokens", r#"{"ttl_secs": 60.5}"#)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert_eq!(r.body["error"]["details"]["field"], "ttl_secs");
}

/// serde reads a struct from an array of its fields in order (`[policy, scheduler]`); the
/// API documents objects, and takes only objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_not_arrays() {
    let m = Manager::start(None).await;
    let r = m.post("/api/v1/groups", r#"{"name": "g"}"#).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    for (path, body) in [
        ("/api/v1/groups/g/policy", "[null, null]"),
        ("/api/v1/groups/g/policy", r#"{"policy": ["demand", 0, 5]}"#),
        ("/api/v1/groups/g/templates", r#"[["small", "cpu=1"]]"#),
        ("/api/v1/groups/g/bootstrap-tokens", "[60]"),
    ] {
        let method = if path.ends_with("bootstrap-tokens") {
            Method::POST
        } else {
            Method::PUT
        };
        let r = m
            .call(method, path, Some(&m.admin.clone()), Some(body))
            .await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{path} {body}: {}",
            r.body
        );
        assert_eq!(r.body["error"]["code"], "invalid_body", "{}", r.body);
    }
    // Nothing changed.
    let g = m.get("/api/v1/groups/g").await.body;
    assert_eq!(g["policy"]["kind"], "fixed");
    assert_eq!(g["templates"], json!([]));
}

/// A log read far past the end (but within i64) answered 500: the seek itself failed (EINVAL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_read_past_the_end_is_empty() {
    let m = Manager::start(None).await;
    let id = scheduled_session(&m).await;
    hello_in_the_log(&m, &id).await;
    for offset in [6, 7, 1 << 40, 9223372036854775806u64, i64::MAX as u64] {
        let r = m
            .get(&format!(
                "/api/v1/sessions/{id}/logs/stdout?offset={offset}"
            ))
            .await;
        assert_eq!(r.status, StatusCode::OK, "offset {offset}: {}", r.body);
        assert_eq!(r.body, Value::Null, "offset {offset}: nothing past the end");
    }
    let r = m
        .get(&format!("/api/v1/sessions/{id}/logs/stdout?offset=2"))
        .await;
    assert_eq!(r.body, "llo\n");
}

/// Every status a route answers is in openapi.json: a session list continued after a session
/// that does not exist is a 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_statuses() {
    let m = Manager::start(None).await;
    let r = m.get("/api/v1/sessions?after=s0000000000000000").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let doc = m
        .call(Method::GET, "/api/v1/openapi.json", None, None)
        .await
        .body;
    let responses = &doc["paths"]["/api/v1/sessions"]["get"]["responses"];
    assert!(responses.get("404").is_some(), "{responses}");
}
