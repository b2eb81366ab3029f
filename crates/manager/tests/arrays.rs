//! Session arrays through the REST API, on SQLite and (with CORRAL_TEST_DATABASE_URL)
//! PostgreSQL: one submission makes a session per index; arrays are read, listed, filtered and
//! cancelled as one, by their owner and admins only.

mod common;

use common::Manager;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// Group `g` (fixed) with agent `a1` registered by hand (the admin speaks for it).
async fn group_with_agent(m: &Manager, capacity: &str) {
    let r = m
        .post(
            "/api/v1/groups",
            r#"{"name": "g", "policy": {"kind": "fixed"}}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let agent = json!({"id": "a1", "group": "g", "capacity": capacity}).to_string();
    let r = m.post("/api/v1/agents", &agent).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
}

async fn submit_as(m: &Manager, token: &str, body: &Value) -> (StatusCode, Value) {
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

/// Submits `body` as `token`'s user and expects an array: its id.
async fn array_as(m: &Manager, token: &str, body: Value) -> String {
    let (status, answer) = submit_as(m, token, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    answer["id"].as_str().unwrap().to_string()
}

async fn get_as(m: &Manager, token: &str, path: &str) -> (StatusCode, Value) {
    let r = m.call(Method::GET, path, Some(token), None).await;
    (r.status, r.body)
}

async fn post_as(m: &Manager, token: &str, path: &str) -> (StatusCode, Value) {
    let r = m.call(Method::POST, path, Some(token), None).await;
    (r.status, r.body)
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

/// Waits (10 s at most) until array `id` is as `done` wants it; what it read.
async fn wait_array(m: &Manager, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let path = format!("/api/v1/arrays/{id}");
    let (path, done) = (&path, &done);
    corral_testkit::eventually_async(
        &format!("array {id} to reach the expected state"),
        std::time::Duration::from_secs(10),
        move || async move {
            let body = m.get(path).await.body;
            if done(&body) {
                Ok(body)
            } else {
                Err(body)
            }
        },
    )
    .await
}

/// Agent a1 reports these sessions ended (admin token, speaking for it).
async fn report(m: &Manager, sessions: Value) {
    let body = json!({"sessions": sessions, "wait_secs": 0}).to_string();
    let r = m.post("/api/v1/agents/a1/sync", &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

on_both!(
    an_array_makes_a_session_per_index_with_its_index_in_place,
    |m: Manager| async move {
        group_with_agent(&m, "cpu=8").await;
        let (status, answer) = submit_as(
            &m,
            &m.admin,
            &json!({
                "group": "g", "request": "cpu=1",
                "command": ["train", "--seed", "{index}", "--out=run-{index}"],
                "inputs": ["data/{index}.csv"], "outputs": ["out-{index}.txt", "log"],
                "environment": {"EPOCHS": "10", "TAG": "{index}"},
                "array": {"first": 1, "last": 10, "step": 3},
            }),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let id = answer["id"].as_str().unwrap().to_string();
        assert!(
            id.len() == 17 && id.starts_with('a'),
            "an array id is a and 16 hex digits: {id}"
        );
        assert_eq!(answer["state"], "pending");
        assert_eq!(answer["required"], json!({"cpu": "1"}));
        assert_eq!(
            answer["array"],
            json!({"id": id, "range": "1-10:3", "sessions": 4, "first_session": format!("{id}x01")})
        );

        let list = m.get(&format!("/api/v1/sessions?array={id}")).await;
        assert_eq!(list.status, StatusCode::OK, "{}", list.body);
        let members = list.body.as_array().unwrap();
        let expected: Vec<String> = ["01", "04", "07", "10"]
            .iter()
            .map(|i| format!("{id}x{i}"))
            .collect();
        assert_eq!(ids(&list.body), expected, "one per index, in index order");
        for (s, index) in members.iter().zip([1, 4, 7, 10]) {
            assert_eq!(s["array"], json!({"id": id, "max_running": null}));
            assert_eq!(s["array_index"], index);
            assert_eq!(s["submitted_at"], members[0]["submitted_at"]);
            assert_eq!(
                s["command"],
                json!([
                    "train",
                    "--seed",
                    index.to_string(),
                    format!("--out=run-{index}")
                ])
            );
            assert_eq!(s["inputs"], json!([format!("data/{index}.csv")]));
            assert_eq!(s["outputs"], json!([format!("out-{index}.txt"), "log"]));
            assert_eq!(
                s["environment"],
                json!({"EPOCHS": "10", "TAG": "{index}", "CORRAL_ARRAY_ID": id,
                       "CORRAL_ARRAY_INDEX": index.to_string()}),
                "{{index}} is replaced in the command, inputs and outputs only"
            );
        }
        // Its sessions are sessions: read one by one, with their history.
        let one = m.get(&format!("/api/v1/sessions/{id}x04")).await;
        assert_eq!(one.status, StatusCode::OK);
        assert_eq!(one.body["history"][0]["reason"], "submitted");

        // The array as one: what was submitted, its sessions by state.
        let array = wait_array(&m, &id, |a| a["counts"]["scheduled"] == 4).await;
        assert_eq!(array["group"], "g");
        assert_eq!(array["range"], "1-10:3");
        assert_eq!(array["sessions"], 4);
        assert_eq!(array["max_running"], Value::Null);
        assert_eq!(array["active"], true);
        assert_eq!(array["max_exit_code"], Value::Null);
        assert_eq!(array["submitted_at"], members[0]["submitted_at"]);
        assert_eq!(
            array["command"],
            json!(["train", "--seed", "{index}", "--out=run-{index}"])
        );
        assert_eq!(
            array["environment"],
            json!({"EPOCHS": "10", "TAG": "{index}"})
        );
        assert_eq!(
            array["counts"],
            json!({"pending": 0, "scheduled": 4, "running": 0, "succeeded": 0, "failed": 0,
                   "cancelled": 0, "rejected": 0})
        );

        // Sessions of no array, apart.
        let (status, single) = submit_as(
            &m,
            &m.admin,
            &json!({"group": "g", "request": "cpu=1", "command": ["true"]}),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{single}");
        assert_eq!(single["array"], Value::Null);
        let outside = m.get("/api/v1/sessions?array=none").await.body;
        assert_eq!(ids(&outside), [single["id"].as_str().unwrap()]);
        assert_eq!(outside[0]["array"], Value::Null);
        assert_eq!(outside[0]["array_index"], Value::Null);
        assert_eq!(
            m.get("/api/v1/sessions")
                .await
                .body
                .as_array()
                .unwrap()
                .len(),
            5
        );

        // Paging through an array's sessions, and newest first.
        let page = m
            .get(&format!(
                "/api/v1/sessions?array={id}&limit=2&after={id}x04"
            ))
            .await
            .body;
        assert_eq!(ids(&page), [format!("{id}x07"), format!("{id}x10")]);
        let newest = m
            .get(&format!("/api/v1/sessions?array={id}&order=newest&limit=1"))
            .await
            .body;
        assert_eq!(ids(&newest), [format!("{id}x10")]);
        let r = m.get("/api/v1/sessions?array=a0000000000000000").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    }
);

on_both!(
    a_range_that_is_not_one_is_refused_naming_it_and_stores_nothing,
    |m: Manager| async move {
        group_with_agent(&m, "cpu=8").await;
        let cases = [
            (
                json!({"first": 9, "last": 3}),
                "array: array range 9-3: the last index is below the first",
            ),
            (
                json!({"first": 0, "last": 9, "step": 0}),
                "array: array range 0-9:0: step 0; the step is 1 or more",
            ),
            (
                json!({"first": 0, "last": 9, "max_running": 0}),
                "array: array range 0-9%0: %0: at most 0 running; the limit is 1 or more",
            ),
            (
                json!({"first": 0, "last": 1_000_000}),
                "array: array range 0-1000000: 1000001 sessions: at most 1,000,000 in one array",
            ),
            (
                json!({"first": 0, "last": 4_294_967_295u64}),
                "array: array range 0-4294967295: 4294967296 sessions: at most 1,000,000 in one \
                 array",
            ),
        ];
        for (range, message) in cases {
            let body =
                json!({"group": "g", "request": "cpu=1", "command": ["true"], "array": range});
            let (status, answer) = submit_as(&m, &m.admin, &body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{range}: {answer}");
            assert_eq!(answer["error"]["message"], message, "{range}");
            assert_eq!(answer["error"]["details"]["field"], "array", "{range}");
        }
        for (body, field) in [
            (
                json!({"group": "g", "request": "cpu=1", "command": ["true"],
                       "array": {"first": 0, "last": 1, "colour": 1}}),
                "array.colour",
            ),
            (
                json!({"group": "g", "request": "cpu=1", "command": ["true"], "array": "0-9"}),
                "array",
            ),
            (
                json!({"group": "g", "request": "cpu=1", "command": ["true"],
                       "environment": {"CORRAL_ARRAY_INDEX": "1"},
                       "array": {"first": 0, "last": 1}}),
                "environment",
            ),
            (
                // Fine as written, too long once {index} is 10 digits.
                json!({"group": "g", "request": "cpu=1", "command": ["true"],
                       "outputs": [format!("{}{{index}}", "x".repeat(248))],
                       "array": {"first": 0, "last": 1_000_000_000u64, "step": 100_000_000}}),
                "outputs[0]",
            ),
        ] {
            let (status, answer) = submit_as(&m, &m.admin, &body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.starts_with(&format!("{field}:")), "{message}");
        }
        // An impossible request is refused once for the whole array.
        let body = json!({"group": "g", "request": "cpu=9", "command": ["true"],
                          "array": {"first": 0, "last": 99}});
        let (status, answer) = submit_as(&m, &m.admin, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(m.get("/api/v1/arrays").await.body, json!([]));
        assert_eq!(m.get("/api/v1/sessions").await.body, json!([]));

        // The most an array may have is accepted (one index only, far apart: 2 sessions).
        let body = json!({"group": "g", "request": "cpu=1", "command": ["true"],
                          "array": {"first": 7, "last": 4_294_967_295u64, "step": 4_294_967_288u64}});
        let id = array_as(&m, &m.admin, body).await;
        let list = m.get(&format!("/api/v1/sessions?array={id}")).await.body;
        assert_eq!(
            ids(&list),
            [format!("{id}x0000000007"), format!("{id}x4294967295")]
        );
    }
);

on_both!(
    an_array_on_a_group_whose_sessions_run_as_batch_jobs_is_refused,
    |m: Manager| async move {
        group_with_agent(&m, "cpu=8").await;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let account = match unsafe { libc::geteuid() } {
            0 => ("run_as", json!("nobody")),
            _ => ("run_as_manager", json!(true)),
        };
        let mut binding = json!({"system": "slurm", "options": {
            "sessions": true, "work_dir": "/nonexistent/work", "bin_dir": "/nonexistent/bin"}});
        binding["options"][account.0] = account.1;
        let r = m.put("/api/v1/groups/g/batch", &binding.to_string()).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let body = json!({"group": "g", "request": "cpu=1", "command": ["true"],
                          "array": {"first": 0, "last": 3}});
        let (status, answer) = submit_as(&m, &m.admin, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["error"]["code"], "arrays_unsupported");
        assert_eq!(answer["error"]["details"]["field"], "array");
        assert_eq!(m.get("/api/v1/arrays").await.body, json!([]));
    }
);

on_both!(
    cancelling_an_array_cancels_its_sessions_not_ended_and_nothing_else,
    |m: Manager| async move {
        group_with_agent(&m, "cpu=4").await;
        let alice = m.user_token("alice").await;
        let body = |last: u32| {
            json!({"group": "g", "request": "cpu=1", "command": ["true"],
                   "array": {"first": 0, "last": last}})
        };
        let a = array_as(&m, &alice, body(5)).await;
        // Four of a's six are placed (a1 has four CPUs), two wait.
        wait_array(&m, &a, |x| x["counts"]["scheduled"] == 4).await;
        let b = array_as(&m, &alice, body(1)).await;
        let (_, single) = submit_as(
            &m,
            &alice,
            &json!({"group": "g", "request": "cpu=1", "command": ["true"]}),
        )
        .await;
        let single = single["id"].as_str().unwrap().to_string();
        // Of a: one fails with code 3, one succeeds, one is cancelled alone.
        report(
            &m,
            json!([{"id": format!("{a}x0"), "state": "failed", "exit_code": 3},
                   {"id": format!("{a}x1"), "state": "succeeded", "exit_code": 0}]),
        )
        .await;
        let (status, _) = post_as(&m, &alice, &format!("/api/v1/sessions/{a}x2/cancel")).await;
        assert_eq!(status, StatusCode::OK);
        let before_b = m.get(&format!("/api/v1/sessions?array={b}")).await.body;
        let before_single = m.get(&format!("/api/v1/sessions/{single}")).await.body;

        let (status, done) = post_as(&m, &alice, &format!("/api/v1/arrays/{a}/cancel")).await;
        assert_eq!(status, StatusCode::OK, "{done}");
        assert_eq!(done["id"], a.as_str());
        assert_eq!(done["cancelled"], 3, "{done}");
        assert_eq!(
            done["counts"],
            json!({"pending": 0, "scheduled": 0, "running": 0, "succeeded": 1, "failed": 1,
                   "cancelled": 4, "rejected": 0})
        );
        let sessions = m.get(&format!("/api/v1/sessions?array={a}")).await.body;
        let states: Vec<&str> = sessions
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["state"].as_str().unwrap())
            .collect();
        assert_eq!(
            states,
            [
                "failed",
                "succeeded",
                "cancelled",
                "cancelled",
                "cancelled",
                "cancelled"
            ]
        );
        for s in &sessions.as_array().unwrap()[3..] {
            assert_eq!(s["end_reason"], "cancelled by alice");
        }
        let x3 = m.get(&format!("/api/v1/sessions/{a}x3")).await.body;
        let last = x3["history"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["state"], "cancelled");
        assert_eq!(last["reason"], "cancelled by alice");
        let events = m.get(&format!("/api/v1/events?session={a}x3")).await.body;
        assert_eq!(events[0]["kind"], "cancelled", "{events}");

        // Nothing else changed but what a's freed capacity let the passes place since: b and
        // the single session may have been placed, never ended.
        let after_b = m.get(&format!("/api/v1/sessions?array={b}")).await.body;
        assert_eq!(ids(&after_b), ids(&before_b));
        for s in after_b.as_array().unwrap() {
            assert!(
                ["pending", "scheduled"].contains(&s["state"].as_str().unwrap()),
                "{s}"
            );
        }
        let after_single = m.get(&format!("/api/v1/sessions/{single}")).await.body;
        assert_eq!(after_single["submitted_at"], before_single["submitted_at"]);
        assert!(["pending", "scheduled"].contains(&after_single["state"].as_str().unwrap()));
        // What a's placed sessions held is free again: b's two and the single one fit.
        wait_array(&m, &b, |x| x["counts"]["scheduled"] == 2).await;
        m.wait_session(&single, |s| s["state"] == "scheduled").await;
        let agent = m.get("/api/v1/agents/a1").await.body;
        assert_eq!(agent["allocated"], json!({"cpu": "3"}), "{agent}");

        let array = m.get(&format!("/api/v1/arrays/{a}")).await.body;
        assert_eq!(array["active"], false);
        assert_eq!(array["max_exit_code"], 3);
        // Again: nothing left to cancel, nothing changes.
        let (status, again) = post_as(&m, &alice, &format!("/api/v1/arrays/{a}/cancel")).await;
        assert_eq!(status, StatusCode::OK, "{again}");
        assert_eq!(again["cancelled"], 0);
        assert_eq!(again["counts"], done["counts"]);
        let (status, _) = post_as(&m, &m.admin, "/api/v1/arrays/a0000000000000000/cancel").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
);

on_both!(
    users_see_and_cancel_only_their_own_arrays_and_list_them_by_filter,
    |m: Manager| async move {
        group_with_agent(&m, "cpu=1").await;
        let r = m.post("/api/v1/groups", r#"{"name": "h"}"#).await;
        assert_eq!(r.status, StatusCode::CREATED);
        let r = m
            .post(
                "/api/v1/agents",
                r#"{"id": "b1", "group": "h", "capacity": "cpu=1"}"#,
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
        let alice = m.user_token("alice").await;
        let bob = m.user_token("bob").await;
        let body = |group: &str| {
            json!({"group": group, "request": "cpu=1", "command": ["true"],
                   "array": {"first": 0, "last": 2, "max_running": 1}})
        };
        let first = array_as(&m, &alice, body("g")).await;
        let second = array_as(&m, &alice, body("h")).await;
        let bobs = array_as(&m, &bob, body("g")).await;

        for path in [
            format!("/api/v1/arrays/{first}"),
            format!("/api/v1/sessions?array={first}"),
        ] {
            let (status, answer) = get_as(&m, &bob, &path).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {answer}");
        }
        let (status, _) = post_as(&m, &bob, &format!("/api/v1/arrays/{first}/cancel")).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (_, mine) = get_as(&m, &alice, "/api/v1/arrays").await;
        assert_eq!(ids(&mine), [first.clone(), second.clone()]);
        assert_eq!(mine[0]["owner"], "alice");
        let (_, widened) = get_as(&m, &alice, "/api/v1/arrays?owner=bob").await;
        assert_eq!(
            ids(&widened),
            ids(&mine),
            "a user's owner filter cannot widen the view"
        );
        let (_, theirs) = get_as(&m, &bob, "/api/v1/arrays").await;
        assert_eq!(ids(&theirs), std::slice::from_ref(&bobs));
        let all = m.get("/api/v1/arrays").await.body;
        assert_eq!(ids(&all), [first.clone(), second.clone(), bobs.clone()]);
        let of_bob = m.get("/api/v1/arrays?owner=bob").await.body;
        assert_eq!(ids(&of_bob), std::slice::from_ref(&bobs));
        let in_h = m.get("/api/v1/arrays?group=h").await.body;
        assert_eq!(ids(&in_h), std::slice::from_ref(&second));
        let r = m.get("/api/v1/arrays?group=nope").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        let newest = m.get("/api/v1/arrays?order=newest&limit=2").await.body;
        assert_eq!(ids(&newest), [bobs.clone(), second.clone()]);
        let page = m
            .get(&format!("/api/v1/arrays?after={first}&limit=1"))
            .await
            .body;
        assert_eq!(ids(&page), std::slice::from_ref(&second));
        let r = m.get("/api/v1/arrays?after=a0000000000000000").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        let r = m.get("/api/v1/arrays/a0000000000000000").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);

        // An admin cancels anyone's; the active filter follows.
        let (status, _) = post_as(&m, &m.admin, &format!("/api/v1/arrays/{bobs}/cancel")).await;
        assert_eq!(status, StatusCode::OK);
        let (status, _) = post_as(&m, &alice, &format!("/api/v1/arrays/{first}/cancel")).await;
        assert_eq!(status, StatusCode::OK);
        let active = m.get("/api/v1/arrays?active=true").await.body;
        assert_eq!(ids(&active), std::slice::from_ref(&second));
        let ended = m.get("/api/v1/arrays?active=false").await.body;
        assert_eq!(ids(&ended), [first.clone(), bobs.clone()]);
        assert_eq!(ended[0]["counts"]["cancelled"], 3);
    }
);

on_both!(
    an_array_with_a_limit_runs_no_more_than_its_limit_at_once,
    |m: Manager| async move {
        group_with_agent(&m, "cpu=8").await;
        let a = array_as(
            &m,
            &m.admin,
            json!({"group": "g", "request": "cpu=1", "command": ["true"],
                   "array": {"first": 0, "last": 5, "max_running": 2}}),
        )
        .await;
        let array = wait_array(&m, &a, |x| x["counts"]["scheduled"] == 2).await;
        assert_eq!(array["range"], "0-5%2");
        assert_eq!(array["max_running"], 2);
        let sessions = m.get(&format!("/api/v1/sessions?array={a}")).await.body;
        let sessions = sessions.as_array().unwrap();
        assert_eq!(sessions[0]["state"], "scheduled");
        assert_eq!(sessions[1]["state"], "scheduled");
        assert_eq!(sessions[0]["array"], json!({"id": a, "max_running": 2}));
        for s in &sessions[2..] {
            assert_eq!(s["state"], "pending");
            let reason = s["wait_reason"].as_str().unwrap_or_default();
            assert!(reason.contains(&format!("its array {a}")), "{s}");
        }
        // Ended one by one: the next takes its place, never more than two at once.
        for (i, next) in [(0, 2), (1, 3), (2, 4)] {
            report(
                &m,
                json!([{"id": format!("{a}x{i}"), "state": "succeeded", "exit_code": 0}]),
            )
            .await;
            m.wait_session(&format!("{a}x{next}"), |s| s["state"] == "scheduled")
                .await;
            let array = m.get(&format!("/api/v1/arrays/{a}")).await.body;
            assert_eq!(array["counts"]["scheduled"], 2, "{array}");
        }
        let agent = m.get("/api/v1/agents/a1").await.body;
        assert_eq!(agent["allocated"], json!({"cpu": "2"}), "{agent}");
    }
);
