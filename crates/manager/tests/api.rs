//! The REST API as users and operators use it, on SQLite and (with CORRAL_TEST_DATABASE_URL)
//! PostgreSQL.

mod common;

use common::Manager;
use reqwest::{Method, StatusCode};
use serde_json::Value;

const GROUP: &str = r#"{"name": "gpu", "policy": {"kind": "fixed"}}"#;
const AGENT: &str = r#"{"id": "a1", "group": "gpu", "capacity": "cpu=8,gpu=2,mem=32GiB"}"#;

async fn group_with_agent(m: &Manager) {
    assert_eq!(
        m.post("/api/v1/groups", GROUP).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        m.post("/api/v1/agents", AGENT).await.status,
        StatusCode::CREATED
    );
}

async fn submit(m: &Manager, token: &str, request: &str) -> (StatusCode, Value) {
    let body = format!(r#"{{"group": "gpu", "command": ["echo", "hi"], "request": "{request}"}}"#);
    let r = m
        .call(Method::POST, "/api/v1/sessions", Some(token), Some(&body))
        .await;
    (r.status, r.body)
}

async fn session_count(m: &Manager) -> usize {
    m.get("/api/v1/sessions")
        .await
        .body
        .as_array()
        .unwrap()
        .len()
}

on_both!(
    submit_places_a_feasible_session_and_refuses_an_impossible_one,
    |m: Manager| async move {
        group_with_agent(&m).await;
        let (status, body) = submit(&m, &m.admin, "gpu=4").await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(body["error"]["code"], "infeasible");
        assert_eq!(
            body["error"]["message"],
            "gpu=4 requested; the largest agent or template offers gpu=2"
        );
        assert_eq!(
            session_count(&m).await,
            0,
            "a refused session is stored nowhere"
        );

        let (status, body) = submit(&m, &m.admin, "gpu=1.5,cpu=2").await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(
            body["error"]["message"],
            "gpu=1.5: ask for whole devices (gpu=1, gpu=2, ...) or for a fraction of one device (gpu=0.5); a request is never split over devices"
        );

        let (status, body) = submit(&m, &m.admin, "gpu=0.5,cpu=2").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let id = body["id"].as_str().unwrap().to_string();
        let s = m.wait_session(&id, |s| s["state"] == "scheduled").await;
        assert_eq!(s["agent"], "a1");
        // a1 gives its GPUs as a number: they stand for devices gpu0 and gpu1.
        assert_eq!(
            s["devices"],
            serde_json::json!([{"id": "gpu0", "kind": "gpu", "share": "0.5", "memory": "0"}])
        );
        assert_eq!(s["command"], serde_json::json!(["echo", "hi"]));
        let agent = m.get("/api/v1/agents/a1").await.body;
        assert_eq!(
            agent["allocated"],
            serde_json::json!({"cpu": "2", "gpu": "0.5"})
        );
        let events = m.get(&format!("/api/v1/events?session={id}")).await.body;
        assert_eq!(events[0]["kind"], "placed", "{events}");
    }
);

on_both!(
    grants_on_devices_given_as_a_number_are_counted_one_by_one,
    |m: Manager| async move {
        group_with_agent(&m).await;
        let placed = |request: &'static str| {
            let m = &m;
            async move {
                let (status, body) = submit(m, &m.admin, request).await;
                assert_eq!(status, StatusCode::CREATED, "{body}");
                let id = body["id"].as_str().unwrap().to_string();
                let s = m.wait_session(&id, |s| s["state"] == "scheduled").await;
                (id, s["devices"][0]["id"].as_str().unwrap().to_string())
            }
        };
        let (half, on) = placed("gpu=0.5").await;
        assert_eq!(on, "gpu0");
        let (_, on) = placed("gpu=1").await;
        assert_eq!(on, "gpu1", "a whole device is an idle one");
        let r = m.post(&format!("/api/v1/sessions/{half}/cancel"), "").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        // gpu1 is held by its grant, not by whichever device the allocation's sum filled first.
        let (_, on) = placed("gpu=1").await;
        assert_eq!(on, "gpu0");
    }
);

on_both!(
    a_placement_the_agent_refuses_goes_back_to_the_queue,
    |m: Manager| async move {
        group_with_agent(&m).await;
        let (_, body) = submit(&m, &m.admin, "gpu=1,cpu=2").await;
        let id = body["id"].as_str().unwrap().to_string();
        m.wait_session(&id, |s| s["state"] == "scheduled").await;
        let report = format!(
            r#"{{"sessions": [{{"id": "{id}", "state": "refused", "reason": "device \"gpu0\" is not one of this agent's devices"}}]}}"#
        );
        let r = m.post("/api/v1/agents/a1/sync", &report).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let kinds = |events: &Value| -> Vec<String> {
            let mut kinds: Vec<String> = events
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["kind"].as_str().unwrap().to_string())
                .collect();
            kinds.sort();
            kinds
        };
        let path = format!("/api/v1/events?session={id}");
        // Back in the queue, then placed again (the group is fixed: a1 has room).
        let events = corral_testkit::eventually_async(
            "the refused session to be placed again",
            std::time::Duration::from_secs(10),
            || async {
                let events = m.get(&path).await.body;
                if kinds(&events) == ["placed", "placed", "requeued"] {
                    Ok(events)
                } else {
                    Err(events)
                }
            },
        )
        .await;
        let requeued = events
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "requeued")
            .unwrap();
        assert_eq!(
            requeued["message"],
            "requeued: agent a1 refused it: device \"gpu0\" is not one of this agent's devices"
        );
        let s = m.wait_session(&id, |s| s["state"] == "scheduled").await;
        assert_eq!(s["agent"], "a1");
        // What it held was freed before it was placed again: held once, not twice.
        let agent = m.get("/api/v1/agents/a1").await.body;
        assert_eq!(
            agent["allocated"],
            serde_json::json!({"cpu": "2", "gpu": "1"})
        );
    }
);

on_both!(
    agents_registered_by_hand_list_devices_and_required_reads_constraints,
    |m: Manager| async move {
        group_with_agent(&m).await;
        let h100 = r#"{"id": "a2", "group": "gpu", "capacity": "cpu=8,gpu=1",
            "devices": [{"id": "GPU-7", "model": "NVIDIA H100 80GB HBM3", "memory": "80GiB"}]}"#;
        let r = m.post("/api/v1/agents", h100).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        assert_eq!(r.body["devices"][0]["id"], "GPU-7");
        // Two devices listed for gpu=1: refused, naming the field; nothing registered.
        let bad = r#"{"id": "a3", "group": "gpu", "capacity": "gpu=1",
            "devices": [{"id": "GPU-8"}, {"id": "GPU-9"}]}"#;
        let r = m.post("/api/v1/agents", bad).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("the devices of kind gpu add up to gpu=2, but the capacity says gpu=1"),
            "{}",
            r.body
        );
        assert_eq!(
            m.get("/api/v1/agents/a3").await.status,
            StatusCode::NOT_FOUND
        );

        let required = |constraints: &'static str| {
            let m = &m;
            async move {
                let body = format!(r#"{{"request": "gpu=1", "constraints": {constraints}}}"#);
                let r = m.post("/api/v1/groups/gpu/required", &body).await;
                assert_eq!(r.status, StatusCode::OK, "{}", r.body);
                r.body
            }
        };
        let r = required(r#"[{"kind": "gpu", "model": "H100*"}]"#).await;
        assert_eq!(r["feasible"], true, "{r}");
        let r = required(r#"[{"kind": "gpu", "model": "B200*"}]"#).await;
        assert_eq!(r["feasible"], false, "{r}");
        assert!(
            r["reason"]
                .as_str()
                .unwrap()
                .contains("no device of the group matches its constraints"),
            "{r}"
        );
        // A constraint without a request of its kind is refused as at submit.
        let r = m
            .post(
                "/api/v1/groups/gpu/required",
                r#"{"request": "cpu=1", "constraints": [{"kind": "gpu", "model": "H100*"}]}"#,
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    }
);

#[tokio::test]
async fn a_templates_device_sets_fill_in_its_slots_and_must_agree_with_them() {
    let m = Manager::start(None).await;
    let body = |slots: &str| {
        serde_json::json!({
            "name": "a100",
            "policy": {"kind": "demand", "max_nodes": 2},
            "templates": [{"name": "p4d", "slots": slots, "max": 2, "devices":
                [{"model": "NVIDIA A100-SXM4-80GB", "memory": "80GiB", "count": 8}]}],
        })
        .to_string()
    };
    // Slots that say otherwise: refused, naming the field; nothing is created.
    let r = m.post("/api/v1/groups", &body("cpu=96,gpu=4")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert_eq!(r.body["error"]["details"]["field"], "templates[0].devices");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the slots say gpu=4, but the devices add up to gpu=8"),
        "{message}"
    );
    assert_eq!(
        m.get("/api/v1/groups/a100").await.status,
        StatusCode::NOT_FOUND
    );

    // Slots that do not say: the devices' totals are filled in.
    let r = m.post("/api/v1/groups", &body("cpu=96")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let slots = &m.get("/api/v1/groups/a100").await.body["templates"][0]["slots"];
    assert_eq!(
        slots,
        &serde_json::json!({"cpu": "96", "gpu": "8", "gpu.mem": "640GiB"}),
        "{slots}"
    );
    // So a fraction with memory fits a template's device, and a model it lacks does not.
    let required = |request: &'static str, constraints: &'static str| {
        let m = &m;
        async move {
            let body = format!(r#"{{"request": "{request}", "constraints": {constraints}}}"#);
            let r = m.post("/api/v1/groups/a100/required", &body).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
            r.body
        }
    };
    let r = required(
        "gpu=0.5,gpu.mem=40GiB",
        r#"[{"kind": "gpu", "model": "A100*"}]"#,
    )
    .await;
    assert_eq!(r["feasible"], true, "{r}");
    let r = required("gpu=1", r#"[{"kind": "gpu", "model": "H100*"}]"#).await;
    assert_eq!(r["feasible"], false, "{r}");
}

on_both!(a_session_that_must_wait_says_why, |m: Manager| async move {
    group_with_agent(&m).await;
    let (_, first) = submit(&m, &m.admin, "gpu=2").await;
    let first = first["id"].as_str().unwrap().to_string();
    m.wait_session(&first, |s| s["state"] == "scheduled").await;
    let (_, second) = submit(&m, &m.admin, "gpu=1").await;
    let second = second["id"].as_str().unwrap().to_string();
    let s = m
        .wait_session(&second, |s| !s["wait_reason"].is_null())
        .await;
    assert_eq!(s["state"], "pending");
    assert_eq!(
        s["wait_reason"],
        "no agent has room; the policy is fixed, so it waits for running sessions to end"
    );
    let pending = m.get("/api/v1/groups/gpu/pending").await.body;
    assert_eq!(pending.as_array().unwrap().len(), 1);

    // Cancelling the first frees its GPUs; the second is placed.
    let r = m
        .post(&format!("/api/v1/sessions/{first}/cancel"), "")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["state"], "cancelled");
    m.wait_session(&second, |s| s["state"] == "scheduled").await;
    let r = m
        .post(&format!("/api/v1/sessions/{first}/cancel"), "")
        .await;
    assert_eq!(
        r.status,
        StatusCode::CONFLICT,
        "cancelling twice: {}",
        r.body
    );
});

on_both!(
    tokens_roles_and_ownership_are_enforced,
    |m: Manager| async move {
        group_with_agent(&m).await;
        let r = m.call(Method::GET, "/api/v1/groups", None, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert_eq!(r.body["error"]["code"], "unauthorized");
        let r = m
            .call(
                Method::GET,
                "/api/v1/groups",
                Some("corral_not-a-token"),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);

        let alice = m.user_token("alice").await;
        let bob = m.user_token("bob").await;
        let r = m
            .call(
                Method::POST,
                "/api/v1/groups",
                Some(&alice),
                Some(r#"{"name": "mine"}"#),
            )
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        let r = m
            .call(Method::POST, "/api/v1/agents/a1/drain", Some(&alice), None)
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);

        let (status, body) = submit(&m, &alice, "cpu=1").await;
        assert_eq!(status, StatusCode::CREATED);
        let id = body["id"].as_str().unwrap();
        let mine = m
            .call(
                Method::GET,
                &format!("/api/v1/sessions/{id}"),
                Some(&alice),
                None,
            )
            .await;
        assert_eq!(mine.body["owner"], "alice");
        let theirs = m
            .call(
                Method::GET,
                &format!("/api/v1/sessions/{id}"),
                Some(&bob),
                None,
            )
            .await;
        assert_eq!(theirs.status, StatusCode::FORBIDDEN);
        let r = m
            .call(
                Method::POST,
                &format!("/api/v1/sessions/{id}/cancel"),
                Some(&bob),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        let bobs_list = m
            .call(Method::GET, "/api/v1/sessions", Some(&bob), None)
            .await;
        assert_eq!(bobs_list.body, serde_json::json!([]));
        let alices_list = m
            .call(
                Method::GET,
                "/api/v1/sessions?owner=bob",
                Some(&alice),
                None,
            )
            .await;
        assert_eq!(
            alices_list.body.as_array().unwrap().len(),
            1,
            "a user's owner filter cannot widen the view"
        );
        let r = m
            .call(
                Method::POST,
                &format!("/api/v1/sessions/{id}/cancel"),
                Some(&alice),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
    }
);

on_both!(
    bad_input_is_refused_naming_the_field_and_writes_nothing,
    |m: Manager| async move {
        group_with_agent(&m).await;
        let cases: &[(&str, StatusCode, &str)] = &[
            ("{", StatusCode::BAD_REQUEST, "body: EOF while parsing"),
            (
                r#"{"group": "gpu", "command": ["x"], "request": "cpu=1", "colour": 1}"#,
                StatusCode::BAD_REQUEST,
                "colour: unknown field `colour`",
            ),
            (
                r#"{"group": "gpu", "command": "x", "request": "cpu=1"}"#,
                StatusCode::BAD_REQUEST,
                "command: invalid type",
            ),
            (
                r#"{"group": "gpu", "command": ["x"], "request": {"cpu": -2}}"#,
                StatusCode::BAD_REQUEST,
                "request: cpu: negative amount",
            ),
            (
                r#"{"group": "gpu", "command": ["x"], "request": {"cpu": "1e30"}}"#,
                StatusCode::BAD_REQUEST,
                "request: cpu: unknown unit",
            ),
            (
                r#"{"group": "gpu", "command": ["x"], "request": {"cpu": "99999999999999999999"}}"#,
                StatusCode::BAD_REQUEST,
                "request: cpu: \"99999999999999999999\" is too large",
            ),
            (
                r#"{"group": "gpu", "command": ["x"], "request": {"cpu": 100000}}"#,
                StatusCode::UNPROCESSABLE_ENTITY,
                "cpu=100000 requested",
            ),
            (
                r#"{"group": "nope", "command": ["x"], "request": "cpu=1"}"#,
                StatusCode::BAD_REQUEST,
                "group: no group \"nope\"",
            ),
            (
                r#"{"group": "gpu", "request": "cpu=1"}"#,
                StatusCode::BAD_REQUEST,
                "command: give a command, an image, or both",
            ),
            (
                r#"{"group": "gpu", "command": ["x"], "request": {}}"#,
                StatusCode::BAD_REQUEST,
                "request: ask for at least one slot",
            ),
            (
                r#"{"group": "gpu", "command": ["x"], "request": "cpu=1", "priority": 5000}"#,
                StatusCode::BAD_REQUEST,
                "priority: 5000 is outside",
            ),
            (
                r#"{"group": "gpu", "command": ["x"], "request": "cpu=1", "inputs": ["../etc/passwd"]}"#,
                StatusCode::BAD_REQUEST,
                "inputs[0]",
            ),
            (
                r#"{"group": "gpu", "command": ["x"], "request": "cpu=1", "image": "ghost"}"#,
                StatusCode::BAD_REQUEST,
                "image: no image \"ghost\"",
            ),
        ];
        for (body, status, message) in cases {
            let r = m.post("/api/v1/sessions", body).await;
            assert_eq!(r.status, *status, "{body}: {}", r.body);
            let got = r.body["error"]["message"].as_str().unwrap_or_default();
            assert!(
                got.contains(message),
                "{body}: expected {message:?} in {got:?}"
            );
        }
        let huge = format!(
            r#"{{"group": "gpu", "command": ["{}"], "request": "cpu=1"}}"#,
            "x".repeat(2 << 20)
        );
        // The manager answers 413 as soon as the size is known and may close the connection
        // while the client still sends: such a send fails on the client's side, so try again
        // until the answer is read (the refusal itself is what is checked). A client of its
        // own, so that the connection the manager closes is not reused by the requests after.
        let once = reqwest::Client::new();
        let mut answer = None;
        for _ in 0..10 {
            let sent = once
                .post(format!("{}/api/v1/sessions", m.base))
                .bearer_auth(&m.admin)
                .header("content-type", "application/json")
                .body(huge.clone())
                .send()
                .await;
            if let Ok(resp) = sent {
                let status = resp.status();
                answer = Some((status, resp.json::<Value>().await.unwrap_or_default()));
                break;
            }
        }
        let (status, body) = answer.expect("the manager answered the oversized body");
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(body["error"]["code"], "too_large");
        assert_eq!(session_count(&m).await, 0);

        let r = m.post("/api/v1/groups", r#"{"name": "bad name!"}"#).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.body["error"]["details"]["field"], "name");
        let r = m
            .post(
                "/api/v1/groups",
                r#"{"name": "g2", "policy": {"min_nodes": 5, "max_nodes": 1}}"#,
            )
            .await;
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("min_nodes (5) is above max_nodes (1)"),
            "{}",
            r.body
        );
        let r = m
            .post(
                "/api/v1/groups",
                r#"{"name": "g2", "templates": [{"name": "t", "slots": "cpu=1", "price": -1}]}"#,
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            m.get("/api/v1/groups/g2").await.status,
            StatusCode::NOT_FOUND,
            "nothing half-written"
        );
        let r = m.get("/api/v1/sessions?limit=lots").await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.body["error"]["code"], "invalid_query");
    }
);

on_both!(
    groups_are_managed_and_deleted_only_when_empty,
    |m: Manager| async move {
        assert_eq!(
            m.post("/api/v1/groups", GROUP).await.status,
            StatusCode::CREATED
        );
        assert_eq!(
            m.post("/api/v1/groups", GROUP).await.status,
            StatusCode::CONFLICT
        );
        let r = m.put("/api/v1/groups/gpu/policy", r#"{"policy": {"kind": "demand", "max_nodes": 4}, "scheduler": {"sequencer": "drf"}}"#).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let g = m.get("/api/v1/groups/gpu").await.body;
        assert_eq!(
            (
                g["policy"]["kind"].clone(),
                g["policy"]["max_nodes"].clone(),
                g["scheduler"]["sequencer"].clone()
            ),
            ("demand".into(), 4.into(), "drf".into())
        );
        let r = m
            .put(
                "/api/v1/groups/gpu/templates",
                r#"[{"name": "g4", "slots": "cpu=32,gpu=4", "price": 3.06, "max": 2}]"#,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(
            m.get("/api/v1/groups/gpu/templates").await.body[0]["slots"]["gpu"],
            "4"
        );

        assert_eq!(
            m.post("/api/v1/agents", AGENT).await.status,
            StatusCode::CREATED
        );
        let r = m
            .call(
                Method::DELETE,
                "/api/v1/groups/gpu",
                Some(&m.admin.clone()),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
        assert_eq!(m.get("/api/v1/groups/gpu").await.status, StatusCode::OK);

        assert_eq!(
            m.post("/api/v1/groups", r#"{"name": "empty"}"#)
                .await
                .status,
            StatusCode::CREATED
        );
        let r = m
            .call(
                Method::DELETE,
                "/api/v1/groups/empty",
                Some(&m.admin.clone()),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
        assert_eq!(
            m.get("/api/v1/groups/empty").await.status,
            StatusCode::NOT_FOUND
        );
    }
);

on_both!(
    group_state_answers_what_the_design_names,
    |m: Manager| async move {
        group_with_agent(&m).await;
        let r = m
            .put("/api/v1/images/cuda", r#"{"min_slots": "gpu=1,mem=8GiB"}"#)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let r = m
            .post(
                "/api/v1/groups/gpu/required",
                r#"{"request": "cpu=1", "image": "cuda"}"#,
            )
            .await;
        assert_eq!(
            r.body["required"],
            serde_json::json!({"cpu": "1", "gpu": "1", "mem": "8GiB"})
        );
        assert_eq!(r.body["feasible"], true);
        let r = m
            .post("/api/v1/groups/gpu/required", r#"{"request": "gpu=3"}"#)
            .await;
        assert_eq!(
            r.body["reason"],
            "gpu=3 requested; the largest agent or template offers gpu=2"
        );
        let shares = m.get("/api/v1/groups/gpu/shares").await.body;
        assert_eq!(
            shares["available"]["a1"],
            serde_json::json!({"cpu": "8", "gpu": "2", "mem": "32GiB"})
        );
        let plan = m.get("/api/v1/groups/gpu/plan").await.body;
        assert_eq!(plan["summary"]["node_count"], 0, "{plan}");
    }
);

on_both!(
    a_drained_agent_gets_nothing_until_unmarked,
    |m: Manager| async move {
        group_with_agent(&m).await;
        let a2 = r#"{"id": "a2", "group": "gpu", "capacity": "cpu=8,gpu=2,mem=32GiB"}"#;
        assert_eq!(
            m.post("/api/v1/agents", a2).await.status,
            StatusCode::CREATED
        );
        let r = m.post("/api/v1/agents/a1/drain", "").await;
        assert_eq!(r.body["state"], "marked");
        assert_eq!(r.body["drained_by_hand"], true);
        let mut ids = Vec::new();
        for _ in 0..3 {
            let (status, body) = submit(&m, &m.admin, "gpu=1").await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
            ids.push(body["id"].as_str().unwrap().to_string());
        }
        for id in &ids[..2] {
            assert_eq!(
                m.wait_session(id, |s| s["state"] == "scheduled").await["agent"],
                "a2"
            );
        }
        let third = m
            .wait_session(&ids[2], |s| !s["wait_reason"].is_null())
            .await;
        assert_eq!(
            third["state"], "pending",
            "nothing lands on a drained agent"
        );
        let r = m.post("/api/v1/agents/a1/unmark", "").await;
        assert_eq!(r.body["state"], "alive");
        assert_eq!(
            m.wait_session(&ids[2], |s| s["state"] == "scheduled").await["agent"],
            "a1"
        );
        let r = m.post("/api/v1/agents/ghost/drain", "").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
    }
);

/// The agent's events of `kind`.
async fn agent_events(m: &Manager, agent: &str, kind: &str) -> Vec<Value> {
    let events = m.get(&format!("/api/v1/events?agent={agent}")).await.body;
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .cloned()
        .collect()
}

/// A sync of agent `id` (with the admin token, which may act as any agent).
async fn sync(m: &Manager, id: &str, body: &str) {
    let r = m.post(&format!("/api/v1/agents/{id}/sync"), body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

on_both!(
    an_agent_that_drains_itself_is_marked_once_and_gets_nothing_new,
    |m: Manager| async move {
        group_with_agent(&m).await;
        for id in ["a2", "a3"] {
            let body =
                format!(r#"{{"id": "{id}", "group": "gpu", "capacity": "cpu=8,gpu=2,mem=32GiB"}}"#);
            assert_eq!(
                m.post("/api/v1/agents", &body).await.status,
                StatusCode::CREATED
            );
        }
        // a3 missed its heartbeats; it comes back draining.
        m.store
            .lose_agent("a3", true, corral_manager::now())
            .await
            .unwrap();

        sync(&m, "a1", r#"{"sessions": [], "draining": true}"#).await;
        let a1 = m.get("/api/v1/agents/a1").await.body;
        assert_eq!(
            (&a1["state"], &a1["drained_by_hand"]),
            (&"marked".into(), &true.into())
        );
        let drains = agent_events(&m, "a1", "drain").await;
        assert_eq!(drains.len(), 1, "{drains:?}");
        assert_eq!(
            drains[0]["message"],
            "agent a1 drains itself: it is about to go"
        );
        assert_eq!(drains[0]["group"], "gpu");

        sync(&m, "a3", r#"{"draining": true}"#).await;
        assert_eq!(
            m.get("/api/v1/agents/a3").await.body["state"],
            "marked",
            "a lost agent back draining is marked, not alive"
        );
        assert_eq!(agent_events(&m, "a3", "back").await.len(), 1);
        assert_eq!(agent_events(&m, "a3", "drain").await.len(), 1);

        // Asking again, or no longer asking, changes nothing and records nothing.
        sync(&m, "a1", r#"{"draining": true}"#).await;
        sync(&m, "a1", r#"{"sessions": []}"#).await;
        assert_eq!(m.get("/api/v1/agents/a1").await.body["state"], "marked");
        assert_eq!(agent_events(&m, "a1", "drain").await.len(), 1);

        // Sessions submitted afterwards go to a2 only: once it is full, they wait.
        let (status, body) = submit(&m, &m.admin, "gpu=2").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let first = body["id"].as_str().unwrap().to_string();
        assert_eq!(
            m.wait_session(&first, |s| s["state"] == "scheduled").await["agent"],
            "a2"
        );
        let (status, body) = submit(&m, &m.admin, "gpu=1").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let second = body["id"].as_str().unwrap().to_string();
        let waiting = m
            .wait_session(&second, |s| !s["wait_reason"].is_null())
            .await;
        assert_eq!(
            (&waiting["state"], &waiting["agent"]),
            (&"pending".into(), &Value::Null),
            "nothing lands on an agent that drains itself: {waiting}"
        );
    }
);

on_both!(
    an_agent_that_drains_itself_is_terminated_once_empty_under_demand,
    |m: Manager| async move {
        let group = r#"{"name": "auto", "policy": {"kind": "demand", "min_nodes": 0}}"#;
        assert_eq!(
            m.post("/api/v1/groups", group).await.status,
            StatusCode::CREATED
        );
        let agent = r#"{"id": "d1", "group": "auto", "capacity": "cpu=4"}"#;
        assert_eq!(
            m.post("/api/v1/agents", agent).await.status,
            StatusCode::CREATED
        );
        sync(&m, "d1", r#"{"draining": true}"#).await;
        // The only agent of the group: the termination is its.
        wait_event(&m, "auto", "terminate", "marked and empty").await;
        assert_eq!(m.get("/api/v1/agents/d1").await.body["state"], "terminated");
        assert_eq!(agent_events(&m, "d1", "drain").await.len(), 1);
    }
);

on_both!(state_survives_a_restart, |m: Manager| async move {
    group_with_agent(&m).await;
    let (_, body) = submit(&m, &m.admin, "cpu=1").await;
    let id = body["id"].as_str().unwrap().to_string();
    m.wait_session(&id, |s| s["state"] == "scheduled").await;
    let admin = m.admin.clone();
    let m = m.restart().await;
    assert_eq!(m.admin, admin, "the admin token is created once");
    let s = m.get(&format!("/api/v1/sessions/{id}")).await.body;
    assert_eq!(
        (s["state"].as_str(), s["agent"].as_str()),
        (Some("scheduled"), Some("a1"))
    );
    assert_eq!(
        m.get("/api/v1/agents/a1").await.body["allocated"]["cpu"],
        "1"
    );
});

#[tokio::test]
async fn the_admin_token_is_private_to_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    let m = Manager::start(None).await;
    let mode = std::fs::metadata(m.config.data_dir.join("admin.token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn every_documented_route_exists_and_every_route_is_documented() {
    let m = Manager::start(None).await;
    let doc: Value = m
        .call(Method::GET, "/api/v1/openapi.json", None, None)
        .await
        .body;
    let paths = doc["paths"].as_object().unwrap();
    let mut documented = Vec::new();
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            let concrete = path.replace("{name}", "x").replace("{id}", "x");
            let r = m
                .call(
                    method.to_uppercase().parse().unwrap(),
                    &concrete,
                    Some(&m.admin.clone()),
                    Some("{}"),
                )
                .await;
            assert_ne!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert_ne!(
                r.body["error"]["message"], "no such endpoint; see /api/v1/openapi.json",
                "{method} {path}"
            );
            documented.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    // The router's routes, read from its source, must all be documented.
    let source = include_str!("../src/api.rs");
    for line in source
        .lines()
        .filter(|l| l.trim_start().starts_with(".route(\""))
    {
        let path = line.split('"').nth(1).unwrap();
        for method in ["get", "post", "put", "delete"] {
            if line.contains(&format!("{method}(")) {
                assert!(
                    documented.contains(&format!("{} {path}", method.to_uppercase())),
                    "{method} {path} is not in openapi.json"
                );
            }
        }
    }
}

on_both!(
    a_bootstrap_token_joins_one_agent_once,
    |m: Manager| async move {
        assert_eq!(
            m.post("/api/v1/groups", GROUP).await.status,
            StatusCode::CREATED
        );
        assert_eq!(
            m.post("/api/v1/groups", r#"{"name": "other"}"#)
                .await
                .status,
            StatusCode::CREATED
        );
        let r = m
            .post("/api/v1/groups/gpu/bootstrap-tokens", r#"{"ttl_secs": 60}"#)
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        let boot = r.body["token"].as_str().unwrap().to_string();
        let join = |id: &str, group: &str| {
            format!(r#"{{"id": "{id}", "group": "{group}", "capacity": "cpu=4"}}"#)
        };
        // It opens nothing but the join, and only for its group.
        let r = m
            .call(Method::GET, "/api/v1/groups", Some(&boot), None)
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        let r = m
            .call(
                Method::POST,
                "/api/v1/agents/join",
                Some(&boot),
                Some(&join("b1", "other")),
            )
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
        let r = m
            .call(
                Method::POST,
                "/api/v1/agents/join",
                Some(&boot),
                Some(&join("b1", "gpu")),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        assert!(r.body["token"].as_str().unwrap().starts_with("corral_"));
        let r = m
            .call(
                Method::POST,
                "/api/v1/agents/join",
                Some(&boot),
                Some(&join("b2", "gpu")),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNAUTHORIZED,
            "a bootstrap token works once: {}",
            r.body
        );
        assert_eq!(
            m.get("/api/v1/agents/b2").await.status,
            StatusCode::NOT_FOUND
        );
        let r = m
            .post("/api/v1/groups/gpu/bootstrap-tokens", r#"{"ttl_secs": 0}"#)
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
    }
);

#[tokio::test]
async fn an_agent_of_another_group_cannot_join_and_the_conflict_names_it_plainly() {
    let m = Manager::start(None).await;
    group_with_agent(&m).await;
    let other = r#"{"name": "cpu", "policy": {"kind": "fixed"}}"#;
    assert_eq!(
        m.post("/api/v1/groups", other).await.status,
        StatusCode::CREATED
    );
    let r = m
        .post(
            "/api/v1/agents/join",
            r#"{"id": "a1", "group": "cpu", "capacity": "cpu=1"}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    // Names as users write them, never a Rust type's Debug form (`AgentId("a1")`).
    assert_eq!(
        r.body["error"]["message"],
        r#"agent "a1" belongs to group "gpu""#
    );
}

#[tokio::test]
async fn an_expired_bootstrap_token_joins_nothing() {
    let m = Manager::start(None).await;
    assert_eq!(
        m.post("/api/v1/groups", GROUP).await.status,
        StatusCode::CREATED
    );
    // A token made an hour ago that was good for a minute: expired, with no waiting.
    let an_hour_ago = corral_core::Timestamp(corral_manager::now().0 - 3_600_000);
    let (boot, _) = corral_manager::auth::create_bootstrap_token(
        &m.store,
        "gpu",
        None,
        std::time::Duration::from_secs(60),
        an_hour_ago,
    )
    .await
    .unwrap();
    let body = r#"{"id": "late", "group": "gpu", "capacity": "cpu=1"}"#;
    let r = m
        .call(Method::POST, "/api/v1/agents/join", Some(&boot), Some(body))
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    assert_eq!(
        r.body["error"]["message"],
        "this token is not valid: unknown, or a bootstrap token that was used already or has expired"
    );
}

on_both!(
    a_groups_provider_is_validated_and_its_secrets_never_shown,
    |m: Manager| async move {
        let r = m
            .post(
                "/api/v1/groups",
                r#"{"name": "cloud", "provider": {"name": "exec",
                    "options": {"command": "/bin/true", "secret_env": {"API_KEY": "s3cret"}},
                    "launch": {"max_provisioning_secs": 120}}}"#,
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        assert_eq!(
            r.body["provider"]["options"]["secret_env"]["API_KEY"],
            "********"
        );
        assert_eq!(r.body["provider"]["launch"]["max_provisioning_secs"], 120);
        for path in [
            "/api/v1/groups/cloud",
            "/api/v1/groups/cloud/provider",
            "/api/v1/groups",
        ] {
            let r = m.get(path).await;
            assert_eq!(r.status, StatusCode::OK);
            assert!(
                !r.body.to_string().contains("s3cret"),
                "{path} shows the secret"
            );
        }

        // What GET shows can be sent back: the redacted secret keeps its stored value (a
        // redacted value with nothing stored behind it is refused).
        let shown = m.get("/api/v1/groups/cloud/provider").await.body;
        let r = m
            .put("/api/v1/groups/cloud/provider", &shown.to_string())
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let mut unknown = shown.clone();
        unknown["options"]["secret_env"]["OTHER"] = "********".into();
        let r = m
            .put("/api/v1/groups/cloud/provider", &unknown.to_string())
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);

        // Bad configurations name the field and change nothing.
        for (body, field) in [
            (r#"{"name": "azure"}"#, "provider.name"),
            (
                r#"{"name": "exec", "options": {"command": "/bin/true", "bogus": 1}}"#,
                "provider.options.bogus",
            ),
            (
                r#"{"name": "exec", "options": {"command": "/opt/no-such-plugin"}}"#,
                "provider.options.command",
            ),
            (
                r#"{"name": "static", "launch": {"budget": 0}}"#,
                "provider.launch.budget",
            ),
        ] {
            let r = m.put("/api/v1/groups/cloud/provider", body).await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.body);
            assert_eq!(r.body["error"]["details"]["field"], field, "{body}");
        }
        let r = m
            .post(
                "/api/v1/groups",
                r#"{"name": "bad", "provider": {"name": "azure"}}"#,
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            m.get("/api/v1/groups/bad").await.status,
            StatusCode::NOT_FOUND
        );
        assert_eq!(m.get("/api/v1/groups/cloud/provider").await.body, shown);

        // Nothing launched yet.
        let r = m.get("/api/v1/groups/cloud/instances").await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body["instances"], serde_json::json!([]));
        // A group without a provider is static.
        m.post("/api/v1/groups", r#"{"name": "onprem"}"#).await;
        assert_eq!(
            m.get("/api/v1/groups/onprem/provider").await.body["name"],
            "static"
        );
    }
);

/// Waits until the group has an event of `kind` whose message contains `words`.
async fn wait_event(m: &Manager, group: &str, kind: &str, words: &str) {
    let what = format!("a {kind} event of {group} with {words:?}");
    corral_testkit::eventually_async(&what, std::time::Duration::from_secs(10), || async {
        let events = m.get(&format!("/api/v1/events?group={group}")).await.body;
        let found = events.as_array().unwrap().iter().any(|e| {
            e["kind"] == kind && e["message"].as_str().unwrap_or_default().contains(words)
        });
        if found {
            Ok(())
        } else {
            Err(format!("events: {events}"))
        }
    })
    .await;
}

#[tokio::test]
async fn a_plugin_not_installed_is_refused_naming_it_and_templates_it_lacks_are_reported() {
    let m = Manager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("plugin.sh");
    let body = serde_json::json!({
        "name": "cloud",
        "templates": [{"name": "small", "slots": "cpu=1"}],
        "provider": {"name": "exec", "options": {"command": plugin},
                     "launch": {"reconcile_secs": 1}},
    });
    // Not there yet: refused, naming the path, and nothing is created.
    let r = m.post("/api/v1/groups", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["field"],
        "provider.options.command"
    );
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(plugin.to_str().unwrap()), "{message}");
    assert_eq!(
        m.get("/api/v1/groups/cloud").await.status,
        StatusCode::NOT_FOUND
    );

    // A plugin offering only its own templates.
    std::fs::write(
        &plugin,
        "#!/bin/sh\ncat > /dev/null\necho '{\"templates\": [{\"name\": \"gpu\", \"slots\": \"gpu=1\"}]}'\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = m.post("/api/v1/groups", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    wait_event(
        &m,
        "cloud",
        "provider",
        "provider exec does not offer template(s) small; it offers gpu",
    )
    .await;
}

/// A provider the driver cannot connect to (its plugin removed after the group was set up) fails
/// what the policy launches at once, and the waiting session's reason says why, with the
/// provider's own words.
#[tokio::test]
async fn a_provider_that_cannot_connect_shows_in_the_wait_reason() {
    use std::os::unix::fs::PermissionsExt;
    let m = Manager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("plugin.sh");
    std::fs::write(
        &plugin,
        "#!/bin/sh\ncase \"$(cat)\" in *'\"op\":\"templates\"'*) echo '{\"templates\": []}';; \
         *) echo '{\"instances\": []}';; esac\n",
    )
    .unwrap();
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let body = serde_json::json!({
        "name": "cloud",
        "policy": {"kind": "demand", "max_nodes": 2},
        "templates": [{"name": "small", "slots": "cpu=1", "max": 2}],
        "provider": {"name": "exec", "options": {"command": plugin},
                     "launch": {"reconcile_secs": 1}},
    });
    let r = m.post("/api/v1/groups", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    // Removed; a change of templates makes the driver connect again, and fail.
    std::fs::remove_file(&plugin).unwrap();
    let r = m
        .put(
            "/api/v1/groups/cloud/templates",
            r#"[{"name": "small", "slots": "cpu=1", "price_per_hour": 0.1, "max": 2}]"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    wait_event(&m, "cloud", "provider", "plugin.sh").await;

    let r = m
        .post(
            "/api/v1/sessions",
            r#"{"group": "cloud", "command": ["true"], "request": "cpu=1"}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let what = "the session's wait reason naming the provider's failure";
    corral_testkit::eventually_async(what, std::time::Duration::from_secs(20), || async {
        let s = m.get(&format!("/api/v1/sessions/{id}")).await.body;
        let reason = s["wait_reason"].as_str().unwrap_or_default().to_string();
        if reason.contains("backs off") && reason.contains("plugin.sh") {
            Ok(())
        } else {
            Err(reason)
        }
    })
    .await;
}

/// A store that cannot write shows in the health check, and writes work again once it can,
/// with no restart. The disk fills up: SQLite's page cap fails writes with SQLITE_FULL
/// ("database or disk is full") exactly as a full disk does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_says_when_the_store_cannot_write_and_writes_resume_once_it_can() {
    let m = Manager::start(None).await;
    group_with_agent(&m).await;
    let submit_padded = |i: usize| {
        let body = serde_json::json!({
            "group": "gpu", "command": ["true"], "request": "cpu=1",
            "environment": {"PAD": format!("{i}{}", "x".repeat(3000))},
        });
        let m = &m;
        async move { m.post("/api/v1/sessions", &body.to_string()).await }
    };
    m.store.sqlite_max_pages_for_test(Some(1)).await.unwrap();
    let mut i = 0;
    let full = loop {
        let r = submit_padded(i).await;
        if r.status != StatusCode::CREATED {
            break r;
        }
        i += 1;
        assert!(i < 1000, "the cap never filled the database");
    };
    assert_eq!(
        full.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        full.body
    );

    let r = m.call(Method::GET, "/api/v1/health", None, None).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert_eq!(r.body["status"], "unavailable");
    let reason = r.body["reason"].as_str().unwrap();
    assert!(reason.contains("database or disk is full"), "{reason}");

    // Room again: the check passes and submits, registrations and cancels go through.
    m.store.sqlite_max_pages_for_test(None).await.unwrap();
    let r = m.call(Method::GET, "/api/v1/health", None, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body, serde_json::json!({"status": "ok"}));
    let r = submit_padded(i).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let r = m
        .post(
            "/api/v1/agents",
            r#"{"id": "a2", "group": "gpu", "capacity": "cpu=1"}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = m.post(&format!("/api/v1/sessions/{id}/cancel"), "{}").await;
    assert!(r.status.is_success(), "{}: {}", r.status, r.body);
}

/// A manager on PostgreSQL moves the files an earlier version kept in its data directory into
/// the database when it starts: a session's log and output and an agent build are served as
/// before (by any manager), and are no longer on its disk; a half-written upload is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_an_earlier_version_kept_on_disk_move_into_the_database() {
    let Some(url) = common::postgres("files_move").await else {
        return;
    };
    let m = Manager::start(Some(url)).await;
    let id = common::scheduled_session(&m).await;
    let session = m.config.data_dir.join("sessions").join(&id);
    std::fs::create_dir_all(session.join("outputs/deep")).unwrap();
    std::fs::create_dir_all(session.join("tmp")).unwrap();
    std::fs::write(session.join("stdout.log"), "from before\n").unwrap();
    std::fs::write(session.join("outputs/deep/r.txt"), "42\n").unwrap();
    std::fs::write(session.join("tmp/3f2a"), "half").unwrap();
    let builds = m.config.data_dir.join("agent-builds");
    std::fs::create_dir_all(&builds).unwrap();
    let sha256 = "ab".repeat(32);
    std::fs::write(builds.join(&sha256), "build bytes").unwrap();
    let build = corral_api::agent_builds::AgentBuild {
        version: "9.9.9".into(),
        platform: "linux-x86_64".into(),
        sha256: sha256.clone(),
        size: 11,
        uploaded_at: corral_core::Timestamp(1),
    };
    m.store.put_agent_build(&build).await.unwrap();

    let m = m.restart().await;
    let read = |path: String| {
        m.client
            .get(format!("{}{path}", m.base))
            .bearer_auth(&m.admin)
            .send()
    };
    let log = read(format!("/api/v1/sessions/{id}/logs/stdout"))
        .await
        .unwrap();
    assert_eq!(log.text().await.unwrap(), "from before\n");
    let outputs = m.get(&format!("/api/v1/sessions/{id}/outputs")).await;
    assert_eq!(
        outputs.body,
        serde_json::json!([{"path": "deep/r.txt", "size": 3}])
    );
    let output = read(format!("/api/v1/sessions/{id}/outputs/deep/r.txt"))
        .await
        .unwrap();
    assert_eq!(output.text().await.unwrap(), "42\n");
    let build = read("/api/v1/agent-builds/9.9.9/linux-x86_64".into())
        .await
        .unwrap();
    assert_eq!(build.text().await.unwrap(), "build bytes");
    for moved in [
        session.join("stdout.log"),
        session.join("outputs/deep/r.txt"),
        builds.join(&sha256),
    ] {
        assert!(!moved.exists(), "{} is still there", moved.display());
    }
    assert!(session.join("tmp/3f2a").exists());
}

on_both!(
    a_template_the_providers_options_name_must_be_the_groups,
    |m: Manager| async move {
        let provider = |template: &str| {
            serde_json::json!({"name": "aws", "options": {
                "image_id": "ami-0123", "endpoint_url": "http://127.0.0.1:9",
                "templates": {template: {"instance_type": "t3.large"}}}})
        };
        let group = |template: &str, provider: serde_json::Value| {
            serde_json::json!({"name": "cloud", "provider": provider,
                "templates": [{"name": template, "slots": "cpu=2"}]})
            .to_string()
        };
        // A misspelt template is refused, naming it and the group's templates; nothing is made.
        let r = m
            .post("/api/v1/groups", &group("small", provider("smal")))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        assert_eq!(
            r.body["error"]["details"]["field"],
            "provider.options.templates.smal"
        );
        assert_eq!(
            r.body["error"]["message"],
            "provider.options.templates.smal: names no template of group \"cloud\" (its templates: small)"
        );
        assert_eq!(
            m.get("/api/v1/groups/cloud").await.status,
            StatusCode::NOT_FOUND
        );
        let r = m
            .post("/api/v1/groups", &group("small", provider("small")))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);

        // Neither can the provider's options be changed to name another, nor the template be
        // renamed from under them.
        let r = m
            .put(
                "/api/v1/groups/cloud/provider",
                &provider("big").to_string(),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        assert_eq!(
            r.body["error"]["details"]["field"],
            "provider.options.templates.big"
        );
        let renamed = serde_json::json!({"name": "cloud",
            "templates": [{"name": "large", "slots": "cpu=2"}]});
        let r = m.put("/api/v1/groups/cloud", &renamed.to_string()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        assert_eq!(
            r.body["error"]["details"]["field"],
            "provider.options.templates.small"
        );
        let kept = m.get("/api/v1/groups/cloud").await.body;
        assert_eq!(kept["templates"][0]["name"], "small", "{kept}");
        // Both at once are one consistent change.
        let r = m
            .put("/api/v1/groups/cloud", &group("large", provider("large")))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }
);
