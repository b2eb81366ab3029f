//! Regression tests for the defects an adversarial review found (issue 9): identities that
//! could be taken over, secrets one user could read of another's sessions, names and paths that
//! escaped, uploads that mixed, capacity held forever, 500s for bad input.

mod common;

use common::Manager;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// Group `g` with agent `a1` (cpu=1), joined through the agent API; returns a1's token.
async fn group_with_agent(m: &Manager, policy: Value) -> String {
    let group = json!({"name": "g", "policy": policy}).to_string();
    assert_eq!(
        m.post("/api/v1/groups", &group).await.status,
        StatusCode::CREATED
    );
    join(m, &m.admin.clone(), "a1", "cpu=1").await
}

async fn join(m: &Manager, token: &str, id: &str, capacity: &str) -> String {
    let body = json!({"id": id, "group": "g", "capacity": capacity}).to_string();
    let r = m
        .call(
            Method::POST,
            "/api/v1/agents/join",
            Some(token),
            Some(&body),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body["token"].as_str().unwrap().to_string()
}

async fn submit(m: &Manager, token: &str, body: Value) -> (StatusCode, Value) {
    let r = m
        .call(
            Method::POST,
            "/api/v1/sessions",
            Some(token),
            Some(&body.to_string()),
        )
        .await;
    (r.status, r.body)
}

/// A session of `token`'s user, `cpu=1`, with a secret in its environment; returns its id.
async fn secret_session(m: &Manager, token: &str, inputs: &[&str]) -> String {
    let (status, body) = submit(
        m,
        token,
        json!({"group": "g", "command": ["sh", "-c", "echo hi"], "request": "cpu=1",
               "environment": {"DB_PASSWORD": "hunter2"}, "inputs": inputs}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_str().unwrap().to_string()
}

async fn bootstrap_token(m: &Manager) -> String {
    let r = m.post("/api/v1/groups/g/bootstrap-tokens", "{}").await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body["token"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_token_cannot_take_over_an_existing_agent() {
    let m = Manager::start(None).await;
    let own = group_with_agent(&m, json!({"kind": "fixed"})).await;
    let bootstrap = bootstrap_token(&m).await;

    let body = json!({"id": "a1", "group": "g", "capacity": "cpu=64", "labels": {"evil": "1"}});
    let r = m
        .call(
            Method::POST,
            "/api/v1/agents/join",
            Some(&bootstrap),
            Some(&body.to_string()),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exists already"),
        "{}",
        r.body
    );
    let a1 = m.get("/api/v1/agents/a1").await.body;
    assert_eq!(a1["capacity"], json!({"cpu": "1"}), "capacity untouched");
    assert_eq!(a1["labels"], json!({}), "labels untouched");

    // The agent's own token re-joins it (a restart); the refused token still creates a new one.
    join(&m, &own, "a1", "cpu=1").await;
    join(&m, &bootstrap, "a2", "cpu=1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_never_see_other_users_sessions_details_and_agents_are_not_users() {
    let m = Manager::start(None).await;
    let a1 = group_with_agent(&m, json!({"kind": "fixed"})).await;
    let alice = m.user_token("alice").await;
    let bob = m.user_token("bob").await;
    secret_session(&m, &alice, &[]).await; // placed on a1
    let queued = secret_session(&m, &alice, &[]).await; // waits: a1 is full
    m.wait_session(&queued, |s| s["state"] == "pending").await;

    let seen = m
        .call(Method::GET, "/api/v1/groups/g/pending", Some(&bob), None)
        .await;
    assert_eq!(seen.status, StatusCode::OK);
    let text = seen.body.to_string();
    assert!(
        text.contains(&queued),
        "bob sees his place in the queue: {text}"
    );
    assert!(!text.contains("hunter2"), "bob sees alice's secret: {text}");
    assert!(
        !text.contains("echo hi"),
        "bob sees alice's command: {text}"
    );
    let own = m
        .call(Method::GET, "/api/v1/groups/g/pending", Some(&alice), None)
        .await;
    assert!(own.body.to_string().contains("hunter2"), "{}", own.body);

    // An agent's token reads no user's sessions, even when the agent is called `bob`.
    let agent_bob = join(&m, &m.admin.clone(), "bob", "cpu=1").await;
    for token in [&a1, &agent_bob] {
        for path in [
            "/api/v1/groups/g/pending",
            "/api/v1/sessions",
            "/api/v1/groups",
        ] {
            let r = m.call(Method::GET, path, Some(token), None).await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}: {}", r.body);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_would_become_paths_are_checked() {
    let m = Manager::start(None).await;
    for name in ["a/b", "../x", "x/../../y", ".", ".."] {
        let r = m
            .post("/api/v1/groups", &json!({"name": name}).to_string())
            .await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "group {name:?}: {}",
            r.body
        );
    }
    group_with_agent(&m, json!({"kind": "fixed"})).await;
    for id in ["x/y", "..", "a/../b"] {
        let body = json!({"id": id, "group": "g", "capacity": "cpu=1"}).to_string();
        let r = m.post("/api/v1/agents/join", &body).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "agent {id:?}: {}",
            r.body
        );
        assert_eq!(r.body["error"]["details"]["field"], "id");
    }
    assert_eq!(
        m.put("/api/v1/images/team%2F..%2Fx", "{}").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        m.put("/api/v1/images/registry:5000%2Fteam%2Fpy:3.12", "{}")
            .await
            .status,
        StatusCode::OK,
        "an image reference keeps its '/'"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_names_that_can_never_be_uploaded_are_refused_at_submit() {
    let m = Manager::start(None).await;
    group_with_agent(&m, json!({"kind": "fixed"})).await;
    let long = "a".repeat(300);
    for bad in [
        "./x",
        ".",
        "a/",
        "a//b",
        long.as_str(),
        "a\u{0}b",
        "/etc/passwd",
        "../x",
    ] {
        let (status, body) = submit(
            &m,
            &m.admin.clone(),
            json!({"group": "g", "command": ["true"], "request": "cpu=1", "inputs": [bad]}),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}: {body}");
        assert_eq!(body["error"]["details"]["field"], "inputs[0]", "{body}");
    }
    let (status, body) = submit(
        &m,
        &m.admin.clone(),
        json!({"group": "g", "command": ["true"], "request": "cpu=1",
               "environment": {"X": "a\u{0}b"}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["details"]["field"], "environment.X");
    assert_eq!(
        m.get("/api/v1/sessions").await.body,
        json!([]),
        "nothing refused was stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_inputs_never_arrive_fails_and_frees_its_agent() {
    let m = Manager::start(None).await;
    group_with_agent(
        &m,
        json!({"kind": "fixed", "termination": {"input_wait_secs": 1}}),
    )
    .await;
    let id = secret_session(&m, &m.admin.clone(), &["data.csv"]).await;
    let s = m.wait_session(&id, |s| s["state"] == "failed").await;
    assert!(
        s["end_reason"]
            .as_str()
            .unwrap()
            .contains("inputs did not arrive within 1 s of its placement (missing: data.csv)"),
        "{s}"
    );
    assert_eq!(
        m.get("/api/v1/agents/a1").await.body["allocated"],
        json!({})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_uploads_each_keep_their_own_bytes() {
    let m = Manager::start(None).await;
    let a1 = group_with_agent(&m, json!({"kind": "fixed"})).await;
    let names = ["data.a", "data.b", "..foo", "dir/x#y?.txt"];
    let id = secret_session(&m, &m.admin.clone(), &names).await;
    m.wait_session(&id, |s| s["state"] == "scheduled").await;
    let content = |name: &str, round: usize| format!("{name} round {round} ").repeat(4000);
    for round in 0..20 {
        let uploads = names.iter().map(|name| {
            let url = format!(
                "{}/api/v1/sessions/{id}/inputs/{}",
                m.base,
                name.replace('#', "%23").replace('?', "%3F")
            );
            m.client
                .put(url)
                .bearer_auth(&m.admin)
                .body(content(name, round))
                .send()
        });
        for r in futures_join(uploads).await {
            assert_eq!(r.unwrap().status(), StatusCode::NO_CONTENT);
        }
        for name in names {
            let url = format!(
                "{}/api/v1/agents/a1/sessions/{id}/inputs/{}",
                m.base,
                name.replace('#', "%23").replace('?', "%3F")
            );
            let got = m.client.get(url).bearer_auth(&a1).send().await.unwrap();
            assert_eq!(got.status(), StatusCode::OK, "{name}");
            assert_eq!(got.text().await.unwrap(), content(name, round), "{name}");
        }
    }
}

/// Runs the futures at once and returns their outputs in order.
async fn futures_join<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_chunk_sent_many_times_at_once_is_written_once() {
    let m = Manager::start(None).await;
    let a1 = group_with_agent(&m, json!({"kind": "fixed"})).await;
    let id = secret_session(&m, &m.admin.clone(), &[]).await;
    m.wait_session(&id, |s| s["state"] == "scheduled").await;
    let chunk = "one chunk\n".repeat(1000);
    let mut expected = String::new();
    for round in 0..20 {
        let url = format!(
            "{}/api/v1/agents/a1/sessions/{id}/logs/stdout?offset={}",
            m.base,
            expected.len()
        );
        let sends = (0..32).map(|_| {
            m.client
                .post(url.clone())
                .bearer_auth(&a1)
                .body(chunk.clone())
                .send()
        });
        let statuses: Vec<StatusCode> = futures_join(sends)
            .await
            .into_iter()
            .map(|r| r.unwrap().status())
            .collect();
        assert_eq!(
            statuses
                .iter()
                .filter(|s| **s == StatusCode::NO_CONTENT)
                .count(),
            1,
            "round {round}: {statuses:?}"
        );
        assert!(statuses
            .iter()
            .all(|s| *s == StatusCode::NO_CONTENT || *s == StatusCode::CONFLICT));
        expected.push_str(&chunk);
    }
    let mut log = String::new();
    while log.len() < expected.len() {
        let part = m
            .get(&format!(
                "/api/v1/sessions/{id}/logs/stdout?offset={}",
                log.len()
            ))
            .await;
        let Value::String(part) = part.body else {
            break;
        };
        log.push_str(&part);
    }
    assert_eq!(log.len(), expected.len(), "each chunk written once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_offsets_and_paths_are_client_errors_and_ended_sessions_take_no_writes() {
    let m = Manager::start(None).await;
    let a1 = group_with_agent(&m, json!({"kind": "fixed"})).await;
    let id = secret_session(&m, &m.admin.clone(), &[]).await;
    m.wait_session(&id, |s| s["state"] == "scheduled").await;
    let agent_call = |method: Method, path: String, body: &'static str| {
        let url = format!("{}{path}", m.base);
        m.client
            .request(method, url)
            .bearer_auth(&a1)
            .body(body)
            .send()
    };
    let put = agent_call(
        Method::PUT,
        format!("/api/v1/agents/a1/sessions/{id}/outputs/ok.txt"),
        "ok",
    )
    .await
    .unwrap();
    assert_eq!(put.status(), StatusCode::NO_CONTENT);

    let big = 1u64 << 63;
    for (method, path) in [
        (
            Method::GET,
            format!("/api/v1/sessions/{id}/logs/stdout?offset={big}"),
        ),
        (
            Method::GET,
            format!("/api/v1/sessions/{id}/outputs/ok.txt%00.png"),
        ),
        (
            Method::GET,
            format!("/api/v1/sessions/{id}/outputs/ok.txt/"),
        ),
    ] {
        let r = m.call(method, &path, Some(&m.admin.clone()), None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}: {}", r.body);
    }
    let r = agent_call(
        Method::POST,
        format!("/api/v1/agents/a1/sessions/{id}/logs/stdout?offset={big}"),
        "x",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = m
        .call(
            Method::GET,
            &format!("/api/v1/sessions/{id}/outputs/ok.txt/x"),
            Some(&m.admin.clone()),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);

    let r = m.post(&format!("/api/v1/sessions/{id}/cancel"), "{}").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    for (method, path) in [
        (
            Method::POST,
            format!("/api/v1/agents/a1/sessions/{id}/logs/stdout?offset=0"),
        ),
        (
            Method::PUT,
            format!("/api/v1/agents/a1/sessions/{id}/outputs/late.txt"),
        ),
    ] {
        let r = agent_call(method, path.clone(), "late").await.unwrap();
        assert_eq!(r.status(), StatusCode::CONFLICT, "{path}");
    }
    let outputs = m.get(&format!("/api/v1/sessions/{id}/outputs")).await.body;
    assert_eq!(outputs, json!([{"path": "ok.txt", "size": 2}]));
}
