//! Image auto-update through a real manager, real agents on the Docker runtime and a real
//! registry (Debian's `docker-registry`): one tag pushed in two versions, each image built
//! locally on the busybox test image with the version in `/version`. Agents of a group with the
//! policy on pull the new digest while a session runs on the old one; that session keeps its
//! image to the end, the next one runs the new one, and an agent of a group with the policy off
//! keeps the old one.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{ok, text, Cluster, Proc};
use serde_json::Value;

/// The label that ties a built image to its test's repository. Without it the two tests would
/// build byte-identical images (same base, same file, Docker's build cache), share their ids,
/// and one test's clean-up would remove the other's images under it.
const TEST_REPOSITORY_LABEL: &str = "corral.test-repository";

/// Builds an image with `version` in `/version` as `tag` (`repository:tag`), in `dir`; its
/// image id.
fn build(dir: &Path, tag: &str, version: &str) -> String {
    let repository = tag
        .rsplit_once(':')
        .map_or(tag, |(repository, _)| repository);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("version"), format!("{version}\n")).unwrap();
    std::fs::write(
        dir.join("Dockerfile"),
        format!(
            "FROM {}\nLABEL {TEST_REPOSITORY_LABEL}={repository}\nCOPY version /version\n",
            corral_runtime::testing::TEST_IMAGE
        ),
    )
    .unwrap();
    let out = Command::new("docker")
        .args(["build", "-q", "-t", tag])
        .arg(dir)
        .output()
        .unwrap();
    ok(out).trim().to_string()
}

fn docker(args: &[&str]) -> String {
    ok(Command::new("docker").args(args).output().unwrap())
}

/// The digest the registry's tag names now, as `docker push` printed it; `config` is the
/// docker client's configuration directory where it logged in, if it did.
fn push(tag: &str, config: Option<&Path>) -> String {
    let config = config.map(|c| c.to_str().unwrap());
    let out = match config {
        Some(dir) => docker(&["--config", dir, "push", tag]),
        None => docker(&["push", tag]),
    };
    let digest = out
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap_or_else(|| panic!("no digest in docker push's output: {out}"));
    digest.to_string()
}

/// Removes the images built for a repository (by their label) when dropped.
struct RemoveImages(String);

impl Drop for RemoveImages {
    fn drop(&mut self) {
        let listed = Command::new("docker")
            .args(["images", "-q", "--no-trunc", "--filter"])
            .arg(format!("label={TEST_REPOSITORY_LABEL}={}", self.0))
            .output();
        if let Ok(listed) = listed {
            let ids: Vec<String> = text(&listed.stdout)
                .split_whitespace()
                .map(String::from)
                .collect();
            if !ids.is_empty() {
                let _ = Command::new("docker")
                    .args(["rmi", "-f"])
                    .args(&ids)
                    .output();
            }
        }
    }
}

/// The digest each agent holds of `image`, by agent.
fn held(c: &Cluster, image: &str) -> Vec<(String, String)> {
    let view = c.json(&["image", "get", image, "-o", "json"]);
    view["agents"]
        .as_array()
        .map(|agents| {
            agents
                .iter()
                .map(|h| {
                    (
                        h["agent"].as_str().unwrap_or_default().to_string(),
                        h["digest"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn until_state(c: &Cluster, id: &str, state: &str) -> Value {
    c.until_for(60, &format!("session {id} {state}"), || {
        let s = c.listed(id);
        (s["state"] == state).then_some(s)
    })
}

/// A session of `image` in `group` submitted (`cat /version`), once it succeeded: its id and
/// what it printed, the version it ran on.
fn version_run(c: &Cluster, group: &str, image: &str) -> (String, String) {
    let id = c.submit(&[
        "--group",
        group,
        "--image",
        image,
        "--request",
        "cpu=1",
        "--",
        "cat",
        "/version",
    ]);
    until_state(c, &id, "succeeded");
    let printed = text(&c.cli(&["session", "logs", &id]).stdout);
    (id, printed)
}

/// `corral group registry add GROUP HOST --username robot`, the password from the environment.
fn add_login(c: &Cluster, group: &str, host: &str, password: &str) -> String {
    let out = c
        .command(&[
            "group",
            "registry",
            "add",
            group,
            host,
            "--username",
            "robot",
            "--password-env",
            "REGISTRY_PASSWORD",
        ])
        .env("REGISTRY_PASSWORD", password)
        .output()
        .unwrap();
    ok(out)
}

fn docker_agent(c: &Cluster, id: &str, group: &str) -> Proc {
    let mut command = c.agent_command(id, group, "cpu=1,mem=256MiB");
    command.args(["--runtime", "docker"]);
    c.agent_from(id, command)
}

/// Docker, the test image and a registry (open, or taking `user` only), or `None` after the
/// skip policy's message.
async fn setup(user: Option<(&str, &str)>) -> Option<corral_testkit::Registry> {
    if !common::docker_available() {
        return None;
    }
    let base = corral_runtime::testing::docker_with_test_image("corral-image-update").await;
    corral_testkit::require_ok("Docker with the test image", base)?;
    match user {
        Some((user, password)) => corral_testkit::Registry::start_with_user(user, password),
        None => corral_testkit::Registry::start(|_| String::new()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_with_the_policy_on_pull_a_new_digest_and_start_new_sessions_on_it() {
    let Some(registry) = setup(None).await else {
        return;
    };
    let c = Cluster::start(5);
    let repository = format!("{}/tiny", registry.host());
    let image = format!("{repository}:latest");
    let _images = RemoveImages(repository.clone());
    let _containers =
        corral_testkit::RemoveContainers::new("label=corral.session").mounting(c.dir.path());
    let context = c.dir.path().join("context");
    let v1 = build(&context, &image, "v1");
    let v1_digest = push(&image, None);

    ok(c.cli(&["image", "put", &image]));
    ok(c.cli(&["group", "create", "on"]));
    ok(c.cli(&[
        "group",
        "set-policy",
        "on",
        "--image-update",
        "on",
        "--image-update-interval-secs",
        "2",
    ]));
    ok(c.cli(&["group", "create", "off"]));
    let group = c.json(&["group", "get", "on", "-o", "json"]);
    assert_eq!(
        group["policy"]["image_update"],
        serde_json::json!({"enabled": true, "interval_secs": 2})
    );
    let _a1 = docker_agent(&c, "imgu-a1", "on");
    let _a2 = docker_agent(&c, "imgu-a2", "on");
    let _b1 = docker_agent(&c, "imgu-b1", "off");

    // A session on each agent: each holds v1. The first one on the group's agents runs until
    // released, so the second lands on the other agent.
    let wait = "cat /version; while [ ! -e /work/go ]; do sleep 0.1; done; cat /version";
    let long = c.submit(&[
        "--group",
        "on",
        "--image",
        &image,
        "--request",
        "cpu=1",
        "--",
        "sh",
        "-c",
        wait,
    ]);
    let long_on = until_state(&c, &long, "running")["agent"]
        .as_str()
        .unwrap()
        .to_string();
    let (short, printed) = version_run(&c, "on", &image);
    assert_eq!(printed, "v1\n");
    assert_eq!(version_run(&c, "off", &image).1, "v1\n");
    let short_on = c.listed(&short)["agent"].as_str().unwrap().to_string();
    assert_ne!(short_on, long_on, "the agents ran one session each");
    c.until("every agent reports holding v1", || {
        let mut held = held(&c, &image);
        held.sort();
        (held
            == vec![
                ("imgu-a1".to_string(), v1_digest.clone()),
                ("imgu-a2".to_string(), v1_digest.clone()),
                ("imgu-b1".to_string(), v1_digest.clone()),
            ])
        .then_some(())
    });

    // v2 is pushed under the same tag; the host's tag goes back to v1, so that only a pull by
    // digest can bring v2 to an agent.
    build(&context, &image, "v2");
    let v2_digest = push(&image, None);
    assert_ne!(v1_digest, v2_digest);
    docker(&["tag", &v1, &image]);

    c.until_for(30, "the agents of group on hold v2", || {
        let held = held(&c, &image);
        let on: Vec<&str> = held
            .iter()
            .filter(|(agent, _)| agent != "imgu-b1")
            .map(|(_, digest)| digest.as_str())
            .collect();
        (on == [v2_digest.as_str(), v2_digest.as_str()]).then_some(())
    });
    let listing = ok(c.cli(&["image", "ls"]));
    assert!(
        listing.contains(&format!("{} (2 agents)", &v2_digest[..19])),
        "{listing}"
    );

    // The session that ran throughout still runs on v1, to its end.
    assert_eq!(c.listed(&long)["state"], "running");
    let work = c.dir.path().join(&long_on).join(&long).join("work");
    std::fs::write(work.join("go"), "").unwrap();
    until_state(&c, &long, "succeeded");
    assert_eq!(text(&c.cli(&["session", "logs", &long]).stdout), "v1\nv1\n");

    // New sessions of the group run on v2; the agent of group off still holds only v1.
    assert_eq!(version_run(&c, "on", &image).1, "v2\n");
    assert_eq!(version_run(&c, "off", &image).1, "v1\n");
    let b1: Vec<(String, String)> = held(&c, &image)
        .into_iter()
        .filter(|(agent, _)| agent == "imgu-b1")
        .collect();
    assert_eq!(b1, vec![("imgu-b1".to_string(), v1_digest.clone())]);

    // The policy's changes are events.
    let events = c.json(&["events", "--group", "on", "-o", "json"]);
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "policy"
                && e["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("image update on: agents check the images they hold every 2 s")),
        "{events}"
    );

    // A registry that is gone: the agents say so in events and try again later; sessions
    // start on what they hold meanwhile.
    drop(registry);
    let failed = c.until_for(30, "an image_check_failed event", || {
        let events = c.json(&["events", "--group", "on", "-o", "json"]);
        events.as_array().and_then(|e| {
            e.iter()
                .find(|e| e["kind"] == "image_check_failed")
                .cloned()
        })
    });
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("could not check or pull {image}"))
            && message.contains("did not answer")
            && message.contains("tries again in 4 s"),
        "{message}"
    );
    assert_eq!(version_run(&c, "on", &image).1, "v2\n");

    // Restarted (the registry still gone, so no check can help): they start new sessions on
    // the digest they last ran, not on the v1 the host's tag still names (issue 51 item 6).
    drop((_a1, _a2));
    let _a1 = docker_agent(&c, "imgu-a1", "on");
    let _a2 = docker_agent(&c, "imgu-a2", "on");
    assert_eq!(version_run(&c, "on", &image).1, "v2\n");
    assert_eq!(version_run(&c, "on", &image).1, "v2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_sign_in_to_a_private_registry_with_their_groups_account() {
    let Some(registry) = setup(Some(("robot", "s3cret-pw"))).await else {
        return;
    };
    let c = Cluster::start(5);
    let repository = format!("{}/private", registry.host());
    let image = format!("{repository}:latest");
    let _images = RemoveImages(repository.clone());
    let _containers =
        corral_testkit::RemoveContainers::new("label=corral.session").mounting(c.dir.path());
    // The test's docker client signs in with a configuration of its own.
    let config = c.dir.path().join("docker-config");
    let login = Command::new("docker")
        .arg("--config")
        .arg(&config)
        .args(["login", &registry.host(), "-u", "robot", "--password-stdin"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(b"s3cret-pw\n")?;
            child.wait_with_output()
        })
        .unwrap();
    ok(login);
    let context = c.dir.path().join("context");
    let v1 = build(&context, &image, "v1");
    let v1_digest = push(&image, Some(&config));
    ok(c.cli(&["image", "put", &image]));
    ok(c.cli(&["group", "create", "private"]));
    ok(c.cli(&[
        "group",
        "set-policy",
        "private",
        "--image-update",
        "on",
        "--image-update-interval-secs",
        "1",
    ]));
    let _p1 = docker_agent(&c, "imgu-p1", "private");
    assert_eq!(version_run(&c, "private", &image).1, "v1\n");
    build(&context, &image, "v2");
    let v2_digest = push(&image, Some(&config));
    docker(&["tag", &v1, &image]);

    // Without the group's account the registry refuses the agent, which says so.
    let refused = c.until_for(30, "an image_check_failed event", || {
        let events = c.json(&["events", "--agent", "imgu-p1", "-o", "json"]);
        events.as_array().and_then(|e| {
            e.iter()
                .find(|e| e["kind"] == "image_check_failed")
                .cloned()
        })
    });
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("refused access"),
        "{refused}"
    );
    assert_eq!(held(&c, &image), [("imgu-p1".to_string(), v1_digest)]);

    // With it, the agent pulls v2; the password is never shown.
    let add = add_login(&c, "private", &registry.host(), "s3cret-pw");
    assert_eq!(
        add.trim(),
        format!("group private signs in to {} as robot", registry.host())
    );
    // Sent back redacted, as answers show it, the password stays what it was: the pull
    // below signs in with it.
    add_login(&c, "private", &registry.host(), "<redacted>");
    let listed = ok(c.cli(&["group", "registry", "ls", "private", "-o", "json"]));
    assert!(!listed.contains("s3cret-pw"), "{listed}");
    let logins: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(
        logins,
        serde_json::json!([{"registry": registry.host(), "username": "robot", "password": "<redacted>"}])
    );
    c.until_for(30, "the agent holds v2", || {
        (held(&c, &image) == [("imgu-p1".to_string(), v2_digest.clone())]).then_some(())
    });
    assert_eq!(version_run(&c, "private", &image).1, "v2\n");
    // Nothing an admin reads shows the password: not the group, not the events.
    for args in [
        &["group", "get", "private", "-o", "json"][..],
        &[
            "events", "--group", "private", "--limit", "1000", "-o", "json",
        ][..],
    ] {
        let shown = ok(c.cli(args));
        assert!(!shown.contains("s3cret-pw"), "{args:?}: {shown}");
    }
    ok(c.cli(&["group", "registry", "rm", "private", &registry.host()]));
    let gone = c.cli(&["group", "registry", "rm", "private", &registry.host()]);
    assert!(!gone.status.success());
    assert!(
        text(&gone.stderr).contains("not found"),
        "{}",
        text(&gone.stderr)
    );
}
