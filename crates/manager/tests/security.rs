//! Regression tests for the defects adversarial reviews found (issues 9 and 43): identities that
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

/// Issue 43: a token's id, which `token ls` shows, gives nothing of its secret away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_listed_id_is_no_part_of_its_secret() {
    let m = Manager::start(None).await;
    for _ in 0..3 {
        let r = m.post("/api/v1/tokens", r#"{"user": "ann"}"#).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        let (id, secret) = (
            r.body["id"].as_str().unwrap(),
            r.body["token"].as_str().unwrap(),
        );
        assert_eq!(id.len(), 12, "{id}");
        let digits = secret.strip_prefix("corral_").unwrap();
        assert!(!digits.contains(id), "id {id} is in secret {secret}");
        let listed = m.get("/api/v1/tokens").await.body;
        assert!(!listed.to_string().contains(digits), "{listed}");
        // It works, and is revoked by its id.
        let me = m
            .call(Method::GET, "/api/v1/sessions", Some(secret), None)
            .await;
        assert_eq!(me.status, StatusCode::OK, "{}", me.body);
        let gone = m
            .call(
                Method::DELETE,
                &format!("/api/v1/tokens/{id}"),
                Some(&m.admin.clone()),
                None,
            )
            .await;
        assert_eq!(gone.status, StatusCode::NO_CONTENT, "{}", gone.body);
    }
}

/// The ids of agent `agent`'s tokens, as `token ls` lists them.
async fn agent_token_ids(m: &Manager, agent: &str) -> Vec<String> {
    let listed = m.get("/api/v1/tokens").await.body;
    listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["role"] == "agent" && t["user"] == agent)
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

/// Issue 43: each join (a self-update's among them) answers with a new agent token; once the
/// agent uses the new one, its older ones are refused, so it keeps one; until then, the old one
/// still works (an update that failed before its new binary used its token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_superseded_tokens_are_revoked_once_its_new_one_is_used() {
    let m = Manager::start(None).await;
    let group = json!({"name": "g", "policy": {"kind": "fixed"}}).to_string();
    assert_eq!(
        m.post("/api/v1/groups", &group).await.status,
        StatusCode::CREATED
    );
    let platform = "linux-x86_64";
    let build = format!("/api/v1/agent-builds/9.9.9/{platform}");
    let r = m
        .client
        .put(format!("{}{build}", m.base))
        .bearer_auth(&m.admin)
        .body("#!/bin/sh\necho corral 9.9.9\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let m = &m;
    let download = |token: String| {
        let (client, url) = (m.client.clone(), format!("{}{build}", m.base));
        async move {
            let r = client.get(url).bearer_auth(token).send().await.unwrap();
            r.status()
        }
    };
    let sync = |token: String| async move {
        m.call(
            Method::POST,
            "/api/v1/agents/a1/sync",
            Some(&token),
            Some("{}"),
        )
        .await
        .status
    };
    let bootstrap = bootstrap_token(m).await;
    let mut old = join(m, &bootstrap, "a1", "cpu=1").await;
    assert_eq!(sync(old.clone()).await, StatusCode::OK);
    // Three updates, each joining with the agent's token of the time.
    for _ in 0..3 {
        let new = join(m, &old, "a1", "cpu=1").await;
        // Not used yet: the old token still works (and is cached by the manager).
        assert_eq!(download(old.clone()).await, StatusCode::OK);
        assert_eq!(sync(old.clone()).await, StatusCode::OK);
        assert_eq!(agent_token_ids(m, "a1").await.len(), 2);
        // Its first use: the old one is refused from then on.
        assert_eq!(sync(new.clone()).await, StatusCode::OK);
        assert_eq!(download(old.clone()).await, StatusCode::UNAUTHORIZED);
        assert_eq!(sync(old.clone()).await, StatusCode::UNAUTHORIZED);
        assert_eq!(download(new.clone()).await, StatusCode::OK);
        assert_eq!(agent_token_ids(m, "a1").await.len(), 1);
        old = new;
    }
}

/// Issue 43: asking for challenges needs no credential, so asking costs the manager nothing to
/// keep: after 1,200 questions for a group (a flood that used to fill its 1,000 places and lock
/// its agents out with 429), its real agent still gets a challenge and joins, with a nonce
/// that joins once only and for its own id only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_challenges_locks_no_external_agent_out() {
    use corral_api::agent_keys::{join_message, AgentKey};
    let m = Manager::start(None).await;
    let group = json!({"name": "g", "policy": {"kind": "fixed", "external": {"enabled": true}}});
    let r = m.post("/api/v1/groups", &group.to_string()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let key = AgentKey::generate().unwrap();
    let add = json!({"name": "lab", "public_key": key.public().to_string()}).to_string();
    let r = m.post("/api/v1/groups/g/agent-keys", &add).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);

    let (m, key) = (&m, &key);
    let challenge = |id: &'static str| async move {
        let body = json!({"group": "g", "id": id}).to_string();
        m.call(
            Method::POST,
            "/api/v1/agents/external/challenge",
            None,
            Some(&body),
        )
        .await
    };
    for _ in 0..1200 {
        let r = challenge("e1").await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    }
    let asked = challenge("e1").await;
    assert_eq!(asked.status, StatusCode::CREATED, "{}", asked.body);
    let nonce = asked.body["nonce"].as_str().unwrap().to_string();
    let expires = asked.body["expires_at"].as_i64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        (now..=now + 61_000).contains(&expires),
        "good for 60 s: {expires}"
    );
    let join_body = |id: &str, nonce: &str| {
        let signed_at = corral_core::Timestamp(now);
        json!({
            "agent": {"id": id, "group": "g", "capacity": "cpu=1"},
            "proof": {
                "public_key": key.public().to_string(),
                "nonce": nonce,
                "signed_at": signed_at,
                "signature": key.sign(&join_message("g", id, nonce, signed_at)),
            }
        })
        .to_string()
    };
    let join = |body: String| async move {
        m.call(
            Method::POST,
            "/api/v1/agents/external/join",
            None,
            Some(&body),
        )
        .await
    };
    // e1's nonce, signed for e2, does not join e2.
    let other = join(join_body("e2", &nonce)).await;
    assert_eq!(other.status, StatusCode::UNAUTHORIZED, "{}", other.body);
    let joined = join(join_body("e1", &nonce)).await;
    assert_eq!(joined.status, StatusCode::CREATED, "{}", joined.body);
    assert!(joined.body["token"].as_str().is_some_and(|t| !t.is_empty()));
    let again = join(join_body("e1", &nonce)).await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED, "{}", again.body);
    assert!(
        again.body.to_string().contains("used already"),
        "{}",
        again.body
    );
    // A nonce altered in any part is no nonce.
    let fresh = challenge("e1").await.body["nonce"]
        .as_str()
        .unwrap()
        .to_string();
    let (rest, expiry_and_mac) = fresh.split_once('.').unwrap();
    let (expiry, mac) = expiry_and_mac.split_once('.').unwrap();
    let later: i64 = expiry.parse::<i64>().unwrap() + 3_600_000;
    for forged in [
        format!("{rest}.{later}.{mac}"),
        format!("{}.{expiry}.{mac}", "0".repeat(rest.len())),
        format!("{rest}.{expiry}.{}", "0".repeat(mac.len())),
        "not a nonce".to_string(),
    ] {
        let r = join(join_body("e1", &forged)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{forged}: {}", r.body);
    }
}
