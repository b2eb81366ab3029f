//! The role matrix: every route of the OpenAPI document, called by every kind of caller, gets
//! the status `role_matrix.txt` says. A route added to the document without a row fails here,
//! so every new route must say who may call it.

mod common;

use std::collections::BTreeSet;

use common::Manager;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const TABLE: &str = include_str!("role_matrix.txt");

const CALLERS: [&str; 9] = [
    "none",
    "garbage",
    "expired",
    "bootstrap",
    "agent_h",
    "agent",
    "bob",
    "alice",
    "admin",
];

struct Row {
    line: usize,
    method: Method,
    route: String,
    path: String,
    body: String,
    expected: Vec<u16>,
}

fn rows() -> Vec<Row> {
    TABLE
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|(i, l)| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4 + CALLERS.len(), "role_matrix.txt:{}: {l}", i + 1);
            Row {
                line: i + 1,
                method: f[0].parse().expect("a method"),
                route: f[1].into(),
                path: f[2].into(),
                body: f[3].into(),
                expected: f[4..]
                    .iter()
                    .map(|s| s.parse().expect("a status"))
                    .collect(),
            }
        })
        .collect()
}

/// An Ed25519 public key, as `corral agent keygen` writes it.
const PUBLIC_KEY: &str = "ed25519:yT+OPK8GQcVq01fE3LzGNCGsbLqbE/dgl367kuYCRIw=";

/// The bodies rows name.
fn body(name: &str) -> Option<(&'static str, Vec<u8>)> {
    let json = |v: Value| Some(("application/json", v.to_string().into_bytes()));
    match name {
        "-" => None,
        "bytes" => Some(("application/octet-stream", b"data".to_vec())),
        "token" => json(json!({"user": "carol"})),
        "group" => json(json!({"name": "new"})),
        "group_g" => json(json!({"name": "g", "policy": {"kind": "fixed"}})),
        "policy" => json(json!({"policy": {"kind": "fixed"}})),
        "empty" => json(json!([])),
        "object" => json(json!({})),
        "provider" => json(json!({"name": "static"})),
        "required" => json(json!({"request": "cpu=1"})),
        "session" => json(json!({"group": "g", "command": ["true"], "request": "cpu=1"})),
        "agent" | "join" => json(json!({"id": "new", "group": "g", "capacity": "cpu=1"})),
        "sync" => json(json!({"sessions": [], "wait_secs": 0})),
        // External agents: group g takes none (its policy is off), whoever asks.
        "challenge" => json(json!({"group": "g", "id": "new"})),
        "key_join" => json(json!({
            "agent": {"id": "new", "group": "g", "capacity": "cpu=1"},
            "proof": {"public_key": PUBLIC_KEY, "nonce": "n", "signed_at": 0, "signature": "AAAA"},
        })),
        "key" => json(json!({"name": "k", "public_key": PUBLIC_KEY})),
        "login" => json(json!({"username": "u", "password": "p"})),
        "batch" => json(json!({"system": "gridengine", "options": {"run_as": "nobody"}})),
        "job" => json(json!({"script": "true"})),
        "signal" => json(json!({"signal": "TERM"})),
        "change" => json(json!({"kind": "resume_node", "node": "n1"})),
        other => panic!("role_matrix.txt names no body {other:?}"),
    }
}

/// A manager with groups g, h and `empty`, agents a1 (g) and b1 (h), users alice and bob,
/// alice's session placed on a1 with its input uploaded and an output, alice's array of two
/// sessions pending in g, image busybox, g bound
/// to a batch system whose commands are missing, and a token for each kind of caller.
struct Fixture {
    m: Manager,
    session: String,
    array: String,
    tokens: Vec<Option<String>>,
}

async fn fixture() -> Fixture {
    let m = Manager::start(None).await;
    for g in ["g", "h", "empty"] {
        let body = json!({"name": g, "policy": {"kind": "fixed"}}).to_string();
        assert_eq!(
            m.post("/api/v1/groups", &body).await.status,
            StatusCode::CREATED
        );
    }
    let join = |id: &'static str, group: &'static str| {
        let body = json!({"id": id, "group": group, "capacity": "cpu=2"}).to_string();
        let m = &m;
        async move {
            let r = m.post("/api/v1/agents/join", &body).await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
            r.body["token"].as_str().unwrap().to_string()
        }
    };
    let a1 = join("a1", "g").await;
    let b1 = join("b1", "h").await;
    let alice = m.user_token("alice").await;
    let bob = m.user_token("bob").await;
    let submit = json!({"group": "g", "command": ["true"], "request": "cpu=1",
                        "inputs": ["in.txt"], "outputs": ["out.txt"],
                        "environment": {"SECRET": "s3cret"}});
    let r = m
        .call(
            Method::POST,
            "/api/v1/sessions",
            Some(&alice),
            Some(&submit.to_string()),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let session = r.body["id"].as_str().unwrap().to_string();
    m.wait_session(&session, |s| s["state"] == "scheduled")
        .await;
    // Alice's array: two sessions a1 could hold but has no room for now (they stay pending).
    let submit = json!({"group": "g", "command": ["true"], "request": "cpu=2",
                        "array": {"first": 0, "last": 1}});
    let r = m
        .call(
            Method::POST,
            "/api/v1/sessions",
            Some(&alice),
            Some(&submit.to_string()),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let array = r.body["id"].as_str().unwrap().to_string();
    for (token, path) in [
        (&alice, format!("/api/v1/sessions/{session}/inputs/in.txt")),
        (
            &a1,
            format!("/api/v1/agents/a1/sessions/{session}/outputs/out.txt"),
        ),
    ] {
        let url = format!("{}{path}", m.base);
        let r = m
            .client
            .put(url)
            .bearer_auth(token)
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT, "{path}");
    }
    assert_eq!(
        m.put("/api/v1/images/busybox", "{}").await.status,
        StatusCode::OK
    );
    // Group g's batch system has no commands here: a call that gets past who may make it is
    // a 503, one that does not never reaches it.
    let mut unreachable = json!({"system": "slurm", "options": {"bin_dir": "/nonexistent"}});
    // The jobs' account: root must name one (`nobody`, as whom the commands are not found
    // either); another account may run them as itself.
    // SAFETY: geteuid has no preconditions and cannot fail.
    let account = match unsafe { libc::geteuid() } {
        0 => ("run_as", json!("nobody")),
        _ => ("run_as_manager", json!(true)),
    };
    unreachable["options"][account.0] = account.1;
    assert_eq!(
        m.put("/api/v1/groups/g/batch", &unreachable.to_string())
            .await
            .status,
        StatusCode::OK
    );
    let bootstrap = m.post("/api/v1/groups/g/bootstrap-tokens", "{}").await.body["token"]
        .as_str()
        .unwrap()
        .to_string();
    let expired = expired_bootstrap_token(&m).await;
    let tokens = vec![
        None,
        Some("corral_0000000000000000000000000000000000000000000000000000000000000000".into()),
        Some(expired),
        Some(bootstrap),
        Some(b1),
        Some(a1),
        Some(bob),
        Some(alice),
        Some(m.admin.clone()),
    ];
    Fixture {
        m,
        session,
        array,
        tokens,
    }
}

/// A bootstrap token of group g that expired a second ago, written straight to the store.
async fn expired_bootstrap_token(m: &Manager) -> String {
    let store = corral_store::Store::open_sqlite_dir(&m.config.data_dir)
        .await
        .unwrap();
    let secret = "corral_expired".to_string();
    let now = corral_core::Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    );
    store
        .insert_bootstrap_token(
            "expired",
            &corral_manager::auth::hash(&secret),
            "g",
            None,
            corral_core::Timestamp(now.0 - 1000),
            corral_core::Timestamp(now.0 - 60_000),
        )
        .await
        .unwrap();
    store.close().await;
    secret
}

async fn call(f: &Fixture, row: &Row, caller: usize) -> u16 {
    let path = row.path.replace("$S", &f.session).replace("$A", &f.array);
    let mut req =
        f.m.client
            .request(row.method.clone(), format!("{}{path}", f.m.base));
    if let Some(token) = &f.tokens[caller] {
        req = req.bearer_auth(token);
    }
    if let Some((kind, bytes)) = body(&row.body) {
        req = req.header("content-type", kind).body(bytes);
    }
    req.send().await.unwrap().status().as_u16()
}

#[test]
fn every_documented_route_has_a_row_and_every_row_a_route() {
    let doc: Value = serde_json::from_str(corral_manager::api::OPENAPI).unwrap();
    let mut documented = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            if ["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                documented.insert(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    let mut rowed = BTreeSet::new();
    for row in rows() {
        let key = format!("{} {}", row.method, row.route);
        assert!(
            rowed.insert(key.clone()),
            "role_matrix.txt:{}: {key} twice",
            row.line
        );
    }
    let missing: Vec<_> = documented.difference(&rowed).collect();
    let extra: Vec<_> = rowed.difference(&documented).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "routes without a row in role_matrix.txt: {missing:?}; rows for undocumented routes: {extra:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_caller_gets_the_status_the_matrix_says() {
    let mut wrong = Vec::new();
    for row in rows() {
        let writes = row.method != Method::GET;
        let mut f = fixture().await;
        for (caller, name) in CALLERS.iter().enumerate() {
            let got = call(&f, &row, caller).await;
            let want = row.expected[caller];
            if got != want {
                wrong.push(format!(
                    "role_matrix.txt:{}: {} {} as {name}: got {got}, want {want}",
                    row.line, row.method, row.route
                ));
            }
            if writes && (200..300).contains(&got) && caller + 1 < CALLERS.len() {
                f = fixture().await;
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}
