//! External agents through a real manager and real agent processes: keys written by `corral
//! agent keygen` and registered with `corral group key add`; joins refused with the reason
//! (policy off, unknown key, limit reached, revoked key); the limit freed by an agent that
//! leaves; a revoked key's agents stopping at once and lost after; the policy turned off live.
//! Proofs no honest agent sends (a bad signature, a replayed or foreign nonce, a stale time)
//! are made with the API client.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{eventually, ok, Cluster, Proc, CORRAL};
use corral_api::agent_keys::{join_message, AgentKey, KeyJoinRequest};
use corral_api::protocol::JoinRequest;
use serde_json::Value;

/// `corral agent keygen --out DIR/NAME.key`: the private key's path.
fn keygen(c: &Cluster, name: &str) -> PathBuf {
    let path = c.dir.path().join(format!("{name}.key"));
    let printed = ok(c.cli(&["agent", "keygen", "--out", path.to_str().unwrap()]));
    assert!(printed.starts_with("ed25519:"), "{printed}");
    path
}

fn add_key(c: &Cluster, group: &str, name: &str, private: &Path) {
    let public = format!("{}.pub", private.display());
    ok(c.cli(&["group", "key", "add", group, name, "--public-key", &public]));
}

/// `corral agent --key`, with no token at all; its log in DIR/ID.log.
fn external_agent(c: &Cluster, id: &str, group: &str, key: &Path) -> Command {
    let log = std::fs::File::create(c.dir.path().join(format!("{id}.log"))).unwrap();
    let mut command = Command::new(CORRAL);
    command
        .args(["agent", "--group", group, "--id", id, "--capacity", "cpu=2"])
        .arg("--work-dir")
        .arg(c.dir.path().join(id))
        .arg("--key")
        .arg(key)
        .env("CORRAL_SERVER", c.url())
        .env_remove("CORRAL_TOKEN")
        .env("CORRAL_CONFIG", c.dir.path().join("none.toml"))
        .stdout(Stdio::null())
        .stderr(log);
    command
}

fn log_of(c: &Cluster, id: &str) -> String {
    std::fs::read_to_string(c.dir.path().join(format!("{id}.log"))).unwrap_or_default()
}

/// Waits for `agent` to exit (20 s at most); asserts it failed and says `why`.
fn exits_saying(c: &Cluster, id: &str, agent: &mut Proc, why: &str) {
    let status = eventually(
        &format!("agent {id} to exit"),
        Duration::from_secs(20),
        || agent.0.try_wait().unwrap(),
    );
    let log = log_of(c, id);
    assert!(!status.success(), "{log}");
    assert!(log.contains(why), "expected {why:?} in:\n{log}");
}

/// Starts an external agent that the manager must refuse: it exits saying `why`.
fn refused(c: &Cluster, id: &str, group: &str, key: &Path, why: &str) {
    let mut agent = Proc(external_agent(c, id, group, key).spawn().unwrap());
    exits_saying(c, id, &mut agent, why);
}

fn agent_state(c: &Cluster, id: &str) -> Value {
    let agents = c.json(&["agent", "ls", "-o", "json"]);
    agents
        .as_array()
        .and_then(|a| a.iter().find(|a| a["id"] == id).cloned())
        .unwrap_or_default()
}

#[test]
fn external_agents_join_with_a_registered_key_within_the_limit_until_revoked() {
    let c = Cluster::start(3);
    ok(c.cli(&["group", "create", "ext"]));
    let (k1, k2, stranger) = (keygen(&c, "k1"), keygen(&c, "k2"), keygen(&c, "k3"));
    // The private key is its owner's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&k1).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let again = c.cli(&["agent", "keygen", "--out", k1.to_str().unwrap()]);
    assert!(
        !again.status.success(),
        "an existing key is never overwritten"
    );
    add_key(&c, "ext", "k1", &k1);
    add_key(&c, "ext", "k2", &k2);

    // The policy is off by default.
    refused(&c, "e1", "ext", &k1, "does not take external agents");
    ok(c.cli(&[
        "group",
        "set-policy",
        "ext",
        "--external",
        "on",
        "--external-limit",
        "2",
    ]));
    let events = c.json(&["events", "--group", "ext", "-o", "json"]);
    assert!(
        events
            .to_string()
            .contains("external agents may join, 2 at most"),
        "{events}"
    );
    refused(
        &c,
        "e1",
        "ext",
        &stranger,
        "is not registered for group \"ext\"",
    );

    // A registered key joins, and its agent takes sessions.
    let e1 = c.agent_from("e1", external_agent(&c, "e1", "ext", &k1));
    assert_eq!(agent_state(&c, "e1")["external"], true);
    let id = c.submit(&["--group", "ext", "--request", "cpu=1", "--", "true"]);
    c.until("the session on the external agent to succeed", || {
        (c.listed(&id)["state"] == "succeeded").then_some(())
    });
    let mut e2 = c.agent_from("e2", external_agent(&c, "e2", "ext", &k2));
    let keys = c.json(&["group", "key", "ls", "ext", "-o", "json"]);
    assert_eq!(keys[0]["name"], "k1");
    assert_eq!(keys[0]["agents"], serde_json::json!(["e1"]), "{keys}");

    // Two take part: a third is refused, until one leaves.
    refused(&c, "e3", "ext", &k1, "its limit (2)");
    let _ = e2.0.kill();
    let _ = e2.0.wait();
    c.until_for(15, "e2 to be lost", || {
        (agent_state(&c, "e2")["state"] == "lost").then_some(())
    });
    let mut e3 = c.agent_from("e3", external_agent(&c, "e3", "ext", &k1));

    // Revoking k1 tells its agents at once; they stop and leave, and are lost after.
    let revoked = ok(c.cli(&["group", "key", "revoke", "ext", "k1"]));
    assert!(revoked.contains("told to leave: e1, e3"), "{revoked}");
    let mut e1 = e1;
    exits_saying(&c, "e1", &mut e1, "its key k1 was revoked");
    exits_saying(&c, "e3", &mut e3, "its key k1 was revoked");
    for id in ["e1", "e3"] {
        c.until_for(15, &format!("{id} to be lost"), || {
            (agent_state(&c, id)["state"] == "lost").then_some(())
        });
    }
    refused(&c, "e4", "ext", &k1, "key k1");
    assert!(
        log_of(&c, "e4").contains("was revoked"),
        "{}",
        log_of(&c, "e4")
    );

    // Turned off live, the policy sends the group's external agents away at their next sync.
    let mut e2 = c.agent_from("e2", external_agent(&c, "e2", "ext", &k2));
    ok(c.cli(&["group", "set-policy", "ext", "--external", "off"]));
    exits_saying(&c, "e2", &mut e2, "does not take external agents");
}

/// `corral agent keygen` writes PKCS#8 v1 (RFC 8410), the form OpenSSL writes and OpenSSL 3.0
/// reads (issue 43: ring's v2 was "unsupported" there).
#[test]
fn a_key_from_keygen_is_pkcs8_v1_and_openssl_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.key");
    let out = Command::new(CORRAL)
        .args(["agent", "keygen", "--out"])
        .arg(&path)
        .env("CORRAL_CONFIG", dir.path().join("none.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let written = std::fs::read_to_string(&path).unwrap();
    let der = pem::parse(&written).unwrap().into_contents();
    // SEQUENCE { INTEGER version, ... }: version 0 is v1 (v2 is 1).
    assert_eq!(&der[..4], [0x30, 0x2e, 0x02, 0x01], "{der:02x?}");
    assert_eq!(der[4], 0, "the PKCS#8 version: {der:02x?}");
    let openssl = Command::new("openssl").arg("version").output();
    if !corral_testkit::require("openssl", openssl.is_ok_and(|o| o.status.success())) {
        return;
    }
    let read = Command::new("openssl")
        .args(["pkey", "-noout", "-in"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "openssl pkey refused the key: {}",
        common::text(&read.stderr)
    );
    // And OpenSSL's public key is the one keygen printed.
    let public = Command::new("openssl")
        .args(["pkey", "-pubout", "-outform", "DER", "-in"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(public.status.success());
    let printed = std::fs::read_to_string(format!("{}.pub", path.display())).unwrap();
    let ours: corral_api::agent_keys::PublicKey = printed.parse().unwrap();
    let spki = public.stdout;
    use base64::Engine;
    let theirs = base64::engine::general_purpose::STANDARD.encode(&spki[spki.len() - 32..]);
    assert_eq!(ours.to_string(), format!("ed25519:{theirs}"));
}

/// The API client against the real manager, for proofs an honest agent never sends.
fn client(c: &Cluster) -> corral_api::Client {
    corral_api::Client::new(&c.url(), "", None).unwrap()
}

fn join_request(id: &str) -> JoinRequest {
    JoinRequest {
        id: id.into(),
        group: "ext".into(),
        capacity: "cpu=1".parse().unwrap(),
        labels: Default::default(),
        devices: Vec::new(),
        version: None,
        platform: None,
        batch_job: None,
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A challenge for `id`, and a join body signed by `key` over `signed` (group, id, nonce,
/// time) as the test chooses.
async fn signed_join(
    api: &corral_api::Client,
    key: &AgentKey,
    id: &str,
    sign: impl Fn(&str) -> (String, String, corral_core::Timestamp),
) -> KeyJoinRequest {
    let challenge: corral_api::agent_keys::Challenge = api
        .post(
            &["agents", "external", "challenge"],
            Some(&serde_json::json!({"group": "ext", "id": id})),
        )
        .await
        .unwrap()
        .body()
        .unwrap();
    let (group, signed_id, signed_at) = sign(&challenge.nonce);
    let message = join_message(&group, &signed_id, &challenge.nonce, signed_at);
    KeyJoinRequest {
        agent: join_request(id),
        proof: corral_api::agent_keys::JoinProof {
            public_key: key.public(),
            nonce: challenge.nonce,
            signed_at,
            signature: key.sign(&message),
        },
    }
}

async fn refusal(api: &corral_api::Client, body: &KeyJoinRequest) -> (u16, String) {
    match api
        .post::<Value, _>(&["agents", "external", "join"], Some(body))
        .await
    {
        Ok(reply) => panic!("joined: {}", reply.text),
        Err(e) => (e.status().unwrap_or_default(), e.to_string()),
    }
}

#[test]
fn forged_replayed_and_stale_proofs_are_refused() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "ext"]));
    ok(c.cli(&["group", "set-policy", "ext", "--external", "on"]));
    let key = AgentKey::generate().unwrap();
    ok(c.cli(&[
        "group",
        "key",
        "add",
        "ext",
        "lab",
        "--public-key",
        &key.public().to_string(),
    ]));
    let now = || corral_core::Timestamp(now_ms());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let api = client(&c);
        // Signed for another id than the one joining: the signature does not hold.
        let forged = signed_join(&api, &key, "x1", |_| ("ext".into(), "x2".into(), now())).await;
        let (status, why) = refusal(&api, &forged).await;
        assert_eq!(status, 401, "{why}");
        assert!(
            why.contains("signature does not verify with key lab"),
            "{why}"
        );

        // Signed ten minutes ago: refused, naming the clock.
        let stale = signed_join(&api, &key, "x1", |_| {
            (
                "ext".into(),
                "x1".into(),
                corral_core::Timestamp(now_ms() - 600_000),
            )
        })
        .await;
        let (status, why) = refusal(&api, &stale).await;
        assert_eq!(status, 401, "{why}");
        assert!(why.contains("600 s behind the manager's clock"), "{why}");

        // A good proof joins once; sent again, its nonce is spent.
        let good = signed_join(&api, &key, "x1", |_| ("ext".into(), "x1".into(), now())).await;
        let joined: corral_api::protocol::JoinResponse = api
            .post(&["agents", "external", "join"], Some(&good))
            .await
            .unwrap()
            .body()
            .unwrap();
        assert!(!joined.token.is_empty());
        let (status, why) = refusal(&api, &good).await;
        assert_eq!(status, 401, "{why}");
        assert!(why.contains("nonce is unknown, used already"), "{why}");

        // A nonce asked for one id does not let another join, even signed for that one.
        let mut foreign =
            signed_join(&api, &key, "x3", |_| ("ext".into(), "x4".into(), now())).await;
        foreign.agent = join_request("x4");
        let (status, why) = refusal(&api, &foreign).await;
        assert_eq!(status, 401, "{why}");
        assert!(why.contains("issued for another agent"), "{why}");

        // An agent's own token is no way back in for an external agent.
        let rejoin = api
            .with_token(&joined.token)
            .join(&join_request("x1"))
            .await
            .unwrap_err();
        assert_eq!(rejoin.status(), Some(409), "{rejoin}");
        assert!(
            rejoin.to_string().contains("joins again with its key"),
            "{rejoin}"
        );
    });
    let agents = c.json(&["agent", "ls", "-o", "json"]);
    let ids: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["x1"], "only the good proof joined: {agents}");
}
