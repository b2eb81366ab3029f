//! Sessions run for real: `corral dev` and `corral session run`, outputs and logs, and an agent
//! killed with SIGKILL whose sessions are requeued and run on another agent.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

fn start_dev(dir: &Path) -> Proc {
    start_dev_isolated(dir, "off")
}

/// `corral dev` with its sessions' sandbox `isolation` (`--isolation`).
fn start_dev_isolated(dir: &Path, isolation: &str) -> Proc {
    let data = dir.join("data");
    let (dev, _) = start_manager(&data, &[], || {
        let mut command = Command::new(CORRAL);
        command
            .args(["dev", "--data-dir"])
            .arg(&data)
            .args(["--capacity", "cpu=2,mem=2GiB", "--isolation", isolation])
            .env("CORRAL_CONFIG", dir.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    });
    // The client configuration is written once the manager listens.
    eventually(
        "corral dev to write its client configuration",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(dir.join("config.toml"))
                .is_ok_and(|c| c.contains("[contexts.dev]"))
        },
    );
    dev
}

/// Issue 51 item 2: a client configuration naming another manager survives `corral dev`, which
/// adds its own context beside it; `config ls`, `config use` and `--context` move between them.
#[test]
fn dev_adds_its_context_beside_a_configuration_that_points_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    // "prod": a manager that does not answer here, and its token.
    let prod = format!("http://127.0.0.1:{}", free_port());
    let config = dir.path().join("config.toml");
    let before = format!("server = \"{prod}\"\ntoken = \"corral_prod_token\"\n");
    std::fs::write(&config, &before).unwrap();
    let _dev = start_dev(dir.path());

    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        written.contains(&before),
        "the prod context is kept as it was:\n{written}"
    );
    let ls = corral(dir.path(), &["config", "ls"]);
    let listed: Vec<Vec<String>> = text(&ls.stdout)
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(listed[0], ["CURRENT", "NAME", "SERVER", "GROUP"]);
    assert_eq!(listed[1], ["default", prod.as_str(), "-"], "{listed:?}");
    assert_eq!(
        (
            listed[2][0].as_str(),
            listed[2][1].as_str(),
            listed[2][3].as_str()
        ),
        ("*", "dev", "dev")
    );
    assert!(listed[2][2].starts_with("http://127.0.0.1:"), "{listed:?}");
    assert!(
        !text(&ls.stdout).contains("corral_prod_token"),
        "tokens are never listed"
    );

    let hello = corral(dir.path(), &["session", "run", "--", "echo", "hello"]);
    assert_eq!(text(&hello.stdout), "hello\n", "{}", text(&hello.stderr));

    // Back to prod: commands go there, and to dev only when asked.
    let used = corral(dir.path(), &["config", "use", "default"]);
    assert_eq!(
        text(&used.stdout),
        format!("using context \"default\" ({prod})\n")
    );
    let unreachable = corral(dir.path(), &["session", "ls"]);
    assert!(
        text(&unreachable.stderr).contains(&format!("cannot reach the manager at {prod}")),
        "{}",
        text(&unreachable.stderr)
    );
    let asked = corral(dir.path(), &["session", "ls", "--context", "dev"]);
    assert_eq!(asked.status.code(), Some(0), "{}", text(&asked.stderr));
    let unknown = corral(dir.path(), &["config", "use", "staging"]);
    assert!(
        text(&unknown.stderr).contains("no context \"staging\"; the config file has: default, dev"),
        "{}",
        text(&unknown.stderr)
    );
    assert!(std::fs::read_to_string(&config)
        .unwrap()
        .contains("current = \"default\""));
}

/// `corral dev --isolation on` (issue 43, items 4 and 10): the manager's data (the admin
/// token) and the client configuration are out of its sessions' reach, and under root they do
/// not run as root.
#[test]
fn dev_sessions_see_neither_the_admin_token_nor_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let _dev = start_dev_isolated(dir.path(), "on");
    let token = dir.path().join("data").join("admin.token");
    assert!(token.exists());
    let script = format!(
        "cat {} 2>/dev/null || echo 'admin token: hidden'; \
         cat {} 2>/dev/null || echo 'client config: hidden'; \
         echo \"pid $$\"; id -u",
        token.display(),
        dir.path().join("config.toml").display()
    );
    let out = corral(dir.path(), &["session", "run", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines[..3],
        ["admin token: hidden", "client config: hidden", "pid 2"],
        "{said}"
    );
    let uid: u32 = lines[3].parse().unwrap();
    if corral_runtime::sandbox::is_root() {
        assert!(uid >= corral_runtime::sandbox::DEFAULT_FIRST_UID, "{said}");
    }
}

#[test]
fn dev_runs_a_session_and_returns_its_output_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let _dev = start_dev(dir.path());
    let out = corral(
        dir.path(),
        &[
            "session",
            "run",
            "--",
            "sh",
            "-c",
            "echo hello; echo oops >&2; exit 3",
        ],
    );
    assert_eq!(text(&out.stdout), "hello\n");
    assert!(text(&out.stderr).contains("oops"), "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3));

    let out = corral(dir.path(), &["session", "run", "--", "echo", "hello"]);
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("hello\n", Some(0)),
        "{}",
        text(&out.stderr)
    );

    // Inputs go in before it starts.
    let input = dir.path().join("numbers.txt");
    std::fs::write(&input, "1\n2\n3\n").unwrap();
    let out = corral(
        dir.path(),
        &[
            "session",
            "run",
            "--input",
            input.to_str().unwrap(),
            "--",
            "wc",
            "-l",
            "numbers.txt",
        ],
    );
    assert_eq!(
        (text(&out.stdout).trim(), out.status.code()),
        ("3 numbers.txt", Some(0)),
        "{}",
        text(&out.stderr)
    );

    // A running session's log can be followed until it ends.
    let out = corral(
        dir.path(),
        &[
            "session",
            "submit",
            "--group",
            "dev",
            "--request",
            "cpu=1",
            "--",
            "sh",
            "-c",
            "echo one; sleep 2; echo two",
        ],
    );
    let id = text(&out.stdout).trim().to_string();
    let out = corral(dir.path(), &["session", "logs", &id, "-f"]);
    // It followed past the sleep, and returned once the session had ended.
    assert_eq!(text(&out.stdout), "one\ntwo\n", "{}", text(&out.stderr));
    let shown = text(&corral(dir.path(), &["session", "get", &id, "-o", "json"]).stdout);
    let state =
        serde_json::from_str::<serde_json::Value>(&shown).unwrap_or_default()["state"].clone();
    assert_eq!(
        state, "succeeded",
        "-f returned before the session ended: {shown}"
    );

    // Outputs come back through the API.
    let out = corral(
        dir.path(),
        &[
            "session",
            "run",
            "--output",
            "result.txt",
            "--",
            "sh",
            "-c",
            "echo 42 > result.txt",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let list = corral(dir.path(), &["session", "ls", "-o", "json"]);
    let sessions: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    // Newest first.
    let last = sessions.as_array().unwrap().first().unwrap();
    assert_eq!(last["state"], "succeeded");
    assert_eq!(last["exit_code"], 0);
    let id = last["id"].as_str().unwrap();
    let got = dir.path().join("got");
    let out = corral(
        dir.path(),
        &["session", "outputs", id, "--dir", got.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(got.join("result.txt")).unwrap(),
        "42\n"
    );
}

/// A `corral server` with a short heartbeat, and agents started as separate processes.

#[test]
fn a_killed_agent_is_lost_and_its_session_runs_again_elsewhere() {
    let c = Cluster::start(3);
    assert!(c.cli(&["group", "create", "g"]).status.success());
    let mut first = c.agent("a1", "g", "cpu=1");
    let id = c.submit(&[
        "--group",
        "g",
        "--request",
        "cpu=1",
        "--",
        "sh",
        "-c",
        "sleep 1; echo done",
    ]);
    c.until("running on a1", || {
        let s = c.listed(&id);
        (s["state"] == "running" && s["agent"] == "a1").then_some(())
    });
    first.0.kill().unwrap(); // SIGKILL
    c.until("requeued after a1 was lost", || {
        (c.listed(&id)["state"] == "pending").then_some(())
    });
    let s = c.json(&["session", "get", &id, "-o", "json"]);
    assert!(
        s["history"]
            .to_string()
            .contains("requeued: agent a1 was lost"),
        "{s}"
    );
    assert_eq!(c.json(&["agent", "ls", "-o", "json"])[0]["state"], "lost");
    let _second = c.agent("a2", "g", "cpu=1");
    c.until("succeeded", || {
        (c.listed(&id)["state"] == "succeeded").then_some(())
    });
    assert_eq!(c.listed(&id)["agent"], "a2");
    assert_eq!(text(&c.cli(&["session", "logs", &id]).stdout), "done\n");
}

#[test]
fn an_idle_interactive_session_is_ended_by_the_policy_and_others_are_not() {
    let c = Cluster::start(5);
    let idle_group = c.dir.path().join("idle.json");
    std::fs::write(
        &idle_group,
        r#"{"name": "idle", "policy": {"termination": {"mode": "idle", "idle_timeout_secs": 2}}}"#,
    )
    .unwrap();
    let out = c.cli(&[
        "group",
        "create",
        "idle",
        "--file",
        idle_group.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(c.cli(&["group", "create", "kept"]).status.success());
    let _agents = [
        c.agent("i1", "idle", "cpu=4"),
        c.agent("k1", "kept", "cpu=4"),
    ];
    let submit = |group: &str, kind: &str| {
        c.submit(&[
            "--group",
            group,
            "--type",
            kind,
            "--request",
            "cpu=1",
            "--",
            "sleep",
            "30",
        ])
    };
    let idle = submit("idle", "interactive");
    let batch = submit("idle", "batch");
    let kept = submit("kept", "interactive");
    // Only listing, never reading a session: a read is activity and would keep it alive.
    let s = c.until("the idle session ends", || {
        let s = c.listed(&idle);
        (s["state"] == "cancelled").then_some(s)
    });
    assert_eq!(s["end_reason"], "ended by the group's policy: idle for 2 s");
    assert_eq!(
        c.listed(&batch)["state"],
        "running",
        "batch sessions end on their own"
    );
    assert_eq!(
        c.listed(&kept)["state"],
        "running",
        "a persistent group ends nothing"
    );
    let events = c.cli(&["events", "--session", &idle, "-o", "json"]);
    assert!(
        text(&events.stdout).contains("idle for 2 s"),
        "{}",
        text(&events.stdout)
    );
    for id in [&batch, &kept] {
        assert!(c.cli(&["session", "cancel", id]).status.success());
    }
}

#[test]
fn a_manager_restart_with_agents_connected_loses_no_running_session() {
    let mut c = Cluster::start(10);
    assert!(c.cli(&["group", "create", "g"]).status.success());
    let _agent = c.agent("a1", "g", "cpu=1");
    let id = c.submit(&[
        "--group",
        "g",
        "--request",
        "cpu=1",
        "--",
        "sh",
        "-c",
        "sleep 3; echo survived",
    ]);
    c.until("running", || {
        (c.listed(&id)["state"] == "running").then_some(())
    });
    c.kill_server(); // while the session runs
    c.start_server();
    c.until("the session survives the restart", || {
        (c.listed(&id)["state"] == "succeeded").then_some(())
    });
    assert_eq!(text(&c.cli(&["session", "logs", &id]).stdout), "survived\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_runs_a_session_in_a_docker_container() {
    let image = corral_runtime::testing::docker_with_test_image("corral-cli-test").await;
    if corral_testkit::require_ok("Docker with the test image", image).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    // The dev agent's containers that mount this test's directory, when the test ends.
    let _containers =
        corral_testkit::RemoveContainers::new("label=corral.agent=dev-agent").mounting(dir.path());
    let data = dir.path().join("data");
    let (_dev, _) = start_manager(&data, &[], || {
        let mut command = Command::new(CORRAL);
        command
            .args(["dev", "--runtime", "docker", "--data-dir"])
            .arg(&data)
            .args(["--capacity", "cpu=2,mem=2GiB"])
            .env("CORRAL_CONFIG", dir.path().join("config.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    });
    eventually("corral dev to come up", Duration::from_secs(30), || {
        dir.path().join("config.toml").exists()
    });
    let image = corral_runtime::testing::TEST_IMAGE;
    let out = corral(dir.path(), &["image", "put", image]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = corral(
        dir.path(),
        &[
            "session",
            "run",
            "--image",
            image,
            "--output",
            "made.txt",
            "--",
            "sh",
            "-c",
            "echo in a container; echo made > made.txt; exit 4",
        ],
    );
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("in a container\n", Some(4)),
        "{}",
        text(&out.stderr)
    );
    let list: serde_json::Value =
        serde_json::from_slice(&corral(dir.path(), &["session", "ls", "-o", "json"]).stdout)
            .unwrap();
    let id = list[0]["id"].as_str().unwrap().to_string();
    let got = dir.path().join("got");
    let out = corral(
        dir.path(),
        &["session", "outputs", &id, "--dir", got.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(got.join("made.txt")).unwrap(),
        "made\n"
    );
    // Its container goes once the manager knows how it ended: none piles up.
    eventually(
        "the ended session's container removed",
        Duration::from_secs(30),
        || {
            let out = Command::new("docker")
                .args([
                    "ps",
                    "-aq",
                    "--filter",
                    &format!("label=corral.session={id}"),
                ])
                .output()
                .unwrap();
            out.status.success() && out.stdout.is_empty()
        },
    );

    // A command in a running container, through the agent's tunnel (a container's exec).
    let out = corral(
        dir.path(),
        &["session", "submit", "--image", image, "--", "sleep", "600"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let running = text(&out.stdout).trim().to_string();
    eventually("exec in the container", Duration::from_secs(60), || {
        let out = corral(
            dir.path(),
            &[
                "session",
                "exec",
                &running,
                "--",
                "sh",
                "-c",
                "echo $CORRAL_SESSION_ID; exit 5",
            ],
        );
        out.status.code() == Some(5) && text(&out.stdout) == format!("{running}\n")
    });
    assert!(corral(dir.path(), &["session", "cancel", &running])
        .status
        .success());
}

#[test]
fn an_agent_on_kubernetes_joins_the_group_its_pod_labels_name() {
    let c = Cluster::start(10);
    assert!(c.cli(&["group", "create", "from-labels"]).status.success());
    let labels = c.dir.path().join("labels");
    std::fs::write(
        &labels,
        "app=\"trainer\"\ncorral.io/group=\"from-labels\"\n",
    )
    .unwrap();
    let _agent = Proc(
        Command::new(CORRAL)
            .args([
                "agent",
                "--metadata",
                "kubernetes",
                "--pod-labels",
                labels.to_str().unwrap(),
                "--id",
                "pod-1",
                "--capacity",
                "cpu=1",
                "--work-dir",
            ])
            .arg(c.dir.path().join("pod-1"))
            .env("CORRAL_SERVER", c.url())
            .env("CORRAL_TOKEN", &c.token)
            .env_remove("CORRAL_AGENT_GROUP")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let agent = c.until("the pod's agent joins", || {
        let agents = c.json(&["agent", "ls", "-o", "json"]);
        agents.as_array().and_then(|a| {
            a.iter()
                .find(|a| a["id"] == "pod-1" && a["state"] == "alive")
                .cloned()
        })
    });
    assert_eq!(agent["group"], "from-labels");
    // Without a group from anywhere, the agent says where one can come from.
    let out = Command::new(CORRAL)
        .args(["agent", "--id", "x"])
        .env("CORRAL_SERVER", c.url())
        .env("CORRAL_TOKEN", &c.token)
        .env_remove("CORRAL_AGENT_GROUP")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--metadata kubernetes|aws"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_agent_joins_with_a_one_time_bootstrap_token() {
    let c = Cluster::start(10);
    assert!(c.cli(&["group", "create", "g"]).status.success());
    let out = c.cli(&["group", "bootstrap-token", "g", "--ttl-secs", "600"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let boot = text(&out.stdout).trim().to_string();
    let agent = |id: &str| {
        Command::new(CORRAL)
            .args([
                "agent",
                "--group",
                "g",
                "--id",
                id,
                "--capacity",
                "cpu=1",
                "--token",
                &boot,
                "--work-dir",
            ])
            .arg(c.dir.path().join(id))
            .env("CORRAL_SERVER", c.url())
            .env_remove("CORRAL_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let _first = Proc(agent("b1"));
    c.until("b1 joins with the bootstrap token", || {
        text(&c.cli(&["agent", "ls", "-o", "json"]).stdout)
            .contains("\"b1\"")
            .then_some(())
    });
    let id = c.submit(&["--group", "g", "--request", "cpu=1", "--", "echo", "joined"]);
    c.until("the session runs on b1", || {
        (c.listed(&id)["state"] == "succeeded").then_some(())
    });
    // Spent: a second agent cannot join with it, and says why.
    let second = agent("b2").wait_with_output().unwrap();
    assert!(!second.status.success());
    assert!(
        text(&second.stderr).contains("used already or has expired"),
        "{}",
        text(&second.stderr)
    );
}

/// Outputs arrive whole or the session says why: directory trees and names with `#` are
/// uploaded; a link leading out of the working directory fails the session with the reason.
#[test]
fn outputs_are_uploaded_as_trees_and_lost_outputs_fail_the_session() {
    let c = Cluster::start(10);
    assert!(c.cli(&["group", "create", "g"]).status.success());
    let _agent = c.agent("a1", "g", "cpu=1");
    let ended = |id: &str| {
        c.until(&format!("session {id} ends"), || {
            let s = c.listed(id);
            matches!(s["state"].as_str(), Some("succeeded" | "failed")).then_some(s)
        })
    };

    let tree = c.submit(&[
        "--group",
        "g",
        "--request",
        "cpu=1",
        "--output",
        "results",
        "--output",
        "x#y.txt",
        "--",
        "sh",
        "-c",
        "mkdir -p results/sub && echo a > results/sub/a.txt && echo b > results/b.txt \
         && echo h > 'x#y.txt'",
    ]);
    let s = ended(&tree);
    assert_eq!(s["state"], "succeeded", "{s}");
    let files = c.json(&["session", "outputs", &tree, "-o", "json"]);
    let paths: Vec<&str> = files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["results/b.txt", "results/sub/a.txt", "x#y.txt"]);

    let escaping = c.submit(&[
        "--group",
        "g",
        "--request",
        "cpu=1",
        "--output",
        "ok.txt",
        "--output",
        "link",
        "--",
        "sh",
        "-c",
        "echo ok > ok.txt && ln -s /etc/passwd link",
    ]);
    let s = ended(&escaping);
    assert_eq!(s["state"], "failed", "{s}");
    let reason = s["end_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("exited with code 0, but its outputs were not saved:")
            && reason.contains("link"),
        "{reason}"
    );

    let missing = c.submit(&[
        "--group",
        "g",
        "--request",
        "cpu=1",
        "--output",
        "never.txt",
        "--",
        "true",
    ]);
    let s = ended(&missing);
    assert_eq!(s["state"], "succeeded", "{s}");
    assert!(
        s["end_reason"].as_str().unwrap().contains("never.txt"),
        "{s}"
    );
}

/// An agent killed while its session runs and started again finds the session, and, from the
/// record it kept beside it, still saves its outputs when it ends.
#[test]
fn an_agent_restarted_while_its_session_runs_still_saves_its_outputs() {
    let c = Cluster::start(60);
    assert!(c.cli(&["group", "create", "g"]).status.success());
    let mut first = c.agent("a1", "g", "cpu=1");
    let id = c.submit(&[
        "--group",
        "g",
        "--request",
        "cpu=1",
        "--env",
        "TOKEN=not-for-disk",
        "--output",
        "out.txt",
        "--",
        "sh",
        "-c",
        "echo started > started; while [ ! -e go ]; do sleep 0.05; done; echo kept > out.txt",
    ]);
    let session = c.dir.path().join("a1").join(&id);
    c.until("the session runs", || {
        session.join("work/started").exists().then_some(())
    });
    let record = std::fs::read_to_string(session.join("assignment.json")).unwrap();
    assert!(record.contains("out.txt"), "{record}");
    assert!(!record.contains("not-for-disk"), "{record}");

    first.0.kill().unwrap(); // SIGKILL: the session goes on without it.
    first.0.wait().unwrap();
    let _second = c.agent("a1", "g", "cpu=1");
    // `agent` returns at once here (the manager still holds a1 alive), so the session must
    // not end before the new agent has re-adopted it, which it does before it joins: wait
    // for its join (CI once saw the session end first, and fail as no longer run).
    c.until("the restarted agent joins", || {
        let events = c.json(&["events", "--agent", "a1", "-o", "json"]);
        let joins = events
            .as_array()?
            .iter()
            .filter(|e| e["kind"] == "joined")
            .count();
        (joins >= 2).then_some(())
    });
    std::fs::write(session.join("work/go"), "").unwrap();
    let s = c.until("the session ends", || {
        let s = c.listed(&id);
        matches!(s["state"].as_str(), Some("succeeded" | "failed")).then_some(s)
    });
    let files = c.json(&["session", "outputs", &id, "-o", "json"]);
    assert_eq!(files[0]["path"], "out.txt", "{files} {s}");
    let into = c.dir.path().join("downloaded");
    let out = c.cli(&["session", "outputs", &id, "--dir", into.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(into.join("out.txt")).unwrap(),
        "kept\n"
    );
}

/// An id that cannot be a URL segment is refused at the join, once, and the agent says why
/// and stops, instead of joining again at full speed.
#[test]
fn an_agent_whose_id_cannot_be_a_path_is_refused_once_and_stops() {
    let c = Cluster::start(10);
    assert!(c.cli(&["group", "create", "g"]).status.success());
    let out = Command::new(CORRAL)
        .args([
            "agent",
            "--group",
            "g",
            "--id",
            "x/y",
            "--capacity",
            "cpu=1",
            "--work-dir",
        ])
        .arg(c.dir.path().join("agent"))
        .env("CORRAL_SERVER", c.url())
        .env("CORRAL_TOKEN", &c.token)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("\"x/y\" is not a valid name"), "{err}");
    assert_eq!(
        c.json(&["agent", "ls", "-o", "json"]),
        serde_json::json!([])
    );
    let events = c.json(&["events", "-o", "json"]);
    assert!(
        !events.to_string().contains("joined"),
        "nothing joined: {events}"
    );
}

/// A pilot job's agent: past `--drain-after` its syncs ask to take nothing new, so the manager
/// marks it (once) and places nothing on it; an agent whose time has not come
/// (`CORRAL_AGENT_DRAIN_AFTER`) goes on taking sessions.
#[test]
fn an_agent_past_its_drain_after_is_marked_and_takes_nothing_new() {
    let c = Cluster::start(10);
    assert!(c.cli(&["group", "create", "g"]).status.success());
    let mut pilot = c.agent_command("p1", "g", "cpu=1");
    pilot.args(["--drain-after", "0"]);
    let _pilot = Proc(pilot.spawn().unwrap());
    let agent = |id: &str| {
        let list = c.json(&["agent", "ls", "-o", "json"]);
        list.as_array()
            .and_then(|l| l.iter().find(|a| a["id"] == id).cloned())
            .unwrap_or_default()
    };
    c.until("p1 joins and drains itself", || {
        let p1 = agent("p1");
        (p1["state"] == "marked").then_some(())
    });
    assert_eq!(agent("p1")["drained_by_hand"], true);

    let mut later = c.agent_command("a2", "g", "cpu=1");
    later.env("CORRAL_AGENT_DRAIN_AFTER", "3600");
    let _later = c.agent_from("a2", later);
    let id = c.submit(&["--group", "g", "--request", "cpu=1", "--", "echo", "hi"]);
    c.until("the session runs on a2", || {
        (c.listed(&id)["state"] == "succeeded").then_some(())
    });
    assert_eq!(c.listed(&id)["agent"], "a2");
    // a2 reported the session running and ended: syncs before its time ask for nothing.
    assert_eq!(agent("a2")["state"], "alive");
    assert_eq!(agent("p1")["state"], "marked");
    let events = c.json(&["events", "--agent", "p1", "-o", "json"]);
    let drains: Vec<_> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "drain")
        .collect();
    assert_eq!(drains.len(), 1, "one event however many syncs: {events}");
}

/// A group whose only agent is drained for maintenance queues what that agent could hold (as
/// Slurm queues jobs for drained nodes), says why it waits, and runs it once the agent is back;
/// what no agent could ever hold is still refused at submit.
#[test]
fn a_request_only_a_drained_agent_could_hold_waits_for_it() {
    let c = Cluster::start(10);
    assert!(c.cli(&["group", "create", "g"]).status.success());
    let _a1 = c.agent("a1", "g", "cpu=2");
    c.until("a1 joins", || {
        let agents = c.json(&["agent", "ls", "-o", "json"]);
        (agents[0]["state"] == "alive").then_some(())
    });
    assert!(c.cli(&["agent", "drain", "a1"]).status.success());

    let id = c.submit(&["--group", "g", "--request", "cpu=2", "--", "echo", "back"]);
    let waiting = c.until("the session says why it waits", || {
        let s = c.listed(&id);
        s["wait_reason"]
            .as_str()
            .is_some_and(|r| r.contains("drained"))
            .then_some(s)
    });
    assert_eq!(waiting["state"], "pending", "{waiting}");
    assert_eq!(
        waiting["wait_reason"],
        "no agent has room; only agent a1 (drained) could hold it, so it waits for one of them \
         to take sessions again"
    );
    let beyond = c.cli(&[
        "session",
        "submit",
        "--group",
        "g",
        "--request",
        "cpu=3",
        "--",
        "true",
    ]);
    assert!(!beyond.status.success());
    assert!(
        text(&beyond.stderr).contains("cpu=3"),
        "{}",
        text(&beyond.stderr)
    );

    assert!(c.cli(&["agent", "unmark", "a1"]).status.success());
    c.until("the session runs once a1 is back", || {
        (c.listed(&id)["state"] == "succeeded").then_some(())
    });
    assert_eq!(text(&c.cli(&["session", "logs", &id]).stdout), "back\n");
}

/// Issue 51 item 3: on a fixed group, `agent rm` of the last agent (a node down for
/// maintenance) leaves the queue waiting for it, saying so, and the sessions run when it joins
/// again; `--forget` says it is gone for good; a node the policy declares is waited for too.
/// What nothing known to the group could hold is still refused at submit.
#[test]
fn a_queue_survives_the_removal_of_the_last_agent() {
    let c = Cluster::start(10);
    ok(c.cli(&["group", "create", "maint"]));
    let node1 = c.agent("node1", "maint", "cpu=8,mem=32GiB");
    ok(c.cli(&["agent", "drain", "node1"]));
    let queued: Vec<String> = (0..2)
        .map(|_| {
            c.submit(&[
                "--group",
                "maint",
                "--request",
                "cpu=2",
                "--",
                "echo",
                "back",
            ])
        })
        .collect();
    c.until("the sessions wait for the drained node", || {
        let s = c.listed(&queued[1]);
        s["wait_reason"]
            .as_str()
            .is_some_and(|r| r.contains("drained"))
            .then_some(())
    });
    drop(node1);
    ok(c.cli(&["agent", "rm", "node1"]));

    for id in &queued {
        let waiting = c.until("the session says it waits for the removed node", || {
            let s = c.listed(id);
            s["wait_reason"]
                .as_str()
                .is_some_and(|r| r.contains("removed"))
                .then_some(s)
        });
        assert_eq!(waiting["state"], "pending", "{waiting}");
        let reason = waiting["wait_reason"].as_str().unwrap();
        assert!(
            reason.starts_with("no agent now; node1 (cpu=8,mem=32GiB) was removed ")
                && reason.ends_with(" ago"),
            "{reason}"
        );
    }
    let more = c.submit(&["--group", "maint", "--request", "cpu=8", "--", "true"]);
    let beyond = c.cli(&[
        "session",
        "submit",
        "--group",
        "maint",
        "--request",
        "cpu=9",
        "--",
        "true",
    ]);
    assert!(!beyond.status.success(), "{}", text(&beyond.stdout));
    assert!(
        text(&beyond.stderr).contains("the group has no agent and no launchable template"),
        "{}",
        text(&beyond.stderr)
    );

    // Back from maintenance: everything queued runs there.
    let node1 = c.agent("node1", "maint", "cpu=8,mem=32GiB");
    for id in queued.iter().chain([&more]) {
        c.until("the queued session runs once node1 is back", || {
            (c.listed(id)["state"] == "succeeded").then_some(())
        });
    }
    assert_eq!(
        text(&c.cli(&["session", "logs", &queued[0]]).stdout),
        "back\n"
    );

    // Gone for good: nothing waits for it.
    drop(node1);
    ok(c.cli(&["agent", "rm", "node1", "--forget"]));
    let refused = c.cli(&[
        "session",
        "submit",
        "--group",
        "maint",
        "--request",
        "cpu=2",
        "--",
        "true",
    ]);
    assert!(!refused.status.success(), "{}", text(&refused.stdout));
    assert!(
        text(&refused.stderr).contains("the group has no agent and no launchable template"),
        "{}",
        text(&refused.stderr)
    );

    // A node the operator declares, not joined yet.
    ok(c.cli(&[
        "group",
        "set-policy",
        "maint",
        "--expected-node",
        "node7=cpu=16,mem=64GiB",
    ]));
    let declared = c.submit(&["--group", "maint", "--request", "cpu=12", "--", "true"]);
    let waiting = c.until("the session says it waits for the declared node", || {
        let s = c.listed(&declared);
        s["wait_reason"].as_str().is_some().then_some(s)
    });
    assert_eq!(
        waiting["wait_reason"],
        "no agent now; node7 (cpu=16,mem=64GiB) is declared for the group and has not joined"
    );
    ok(c.cli(&["group", "set-policy", "maint", "--expected-node", "node7="]));
    let shown = c.json(&["group", "get", "maint", "-o", "json"]);
    assert_eq!(
        shown["policy"]["expected_nodes"],
        serde_json::json!({}),
        "{shown}"
    );
}

/// Issue 51 item 8: a session's time limit (`--time`, else its group's default) is enforced by
/// its agent, which stops it (SIGTERM first, so it may save its work) and says why; a limit
/// above the group's maximum lifetime is refused at submit.
#[test]
fn a_session_past_its_time_limit_is_stopped_and_says_so() {
    let c = Cluster::start(10);
    let file = c.dir.path().join("timed.json");
    let group = serde_json::json!({"name": "timed", "policy": {"termination":
        {"max_lifetime_secs": 3600, "default_time_limit_secs": 2}}});
    std::fs::write(&file, group.to_string()).unwrap();
    ok(c.cli(&["group", "create", "timed", "--file", file.to_str().unwrap()]));
    let _a1 = c.agent("a1", "timed", "cpu=2");

    // It learns of the end by SIGTERM and has time to say so.
    let script = "trap 'echo saved; exit 143' TERM; echo started; while true; do sleep 0.1; done";
    let run = c.cli(&[
        "session", "run", "--group", "timed", "--time", "1s", "--", "sh", "-c", script,
    ]);
    assert_eq!(
        text(&run.stdout),
        "started\nsaved\n",
        "{}",
        text(&run.stderr)
    );
    assert_eq!(run.status.code(), Some(143), "{}", text(&run.stderr));
    let sessions = c.json(&["session", "ls", "-o", "json"]);
    let ended = &sessions.as_array().unwrap()[0];
    assert_eq!(ended["state"], "failed", "{ended}");
    assert_eq!(ended["time_limit_secs"], 1, "{ended}");
    let reason = ended["end_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("time limit of 1 s reached: stopped"),
        "{reason}"
    );

    // No --time: the group's default.
    let id = c.submit(&["--group", "timed", "--", "sleep", "600"]);
    let ended = c.until("the session reaches the group's default limit", || {
        let s = c.listed(&id);
        (s["state"] == "failed").then_some(s)
    });
    assert!(
        ended["end_reason"]
            .as_str()
            .unwrap()
            .starts_with("time limit of 2 s reached"),
        "{ended}"
    );

    let long = c.cli(&[
        "session", "submit", "--group", "timed", "--time", "2h", "--", "true",
    ]);
    assert!(!long.status.success());
    assert!(
        text(&long.stderr).contains("7200 s is more than group \"timed\" allows (3600 s)"),
        "{}",
        text(&long.stderr)
    );
    let bare = c.cli(&[
        "session", "submit", "--group", "timed", "--time", "120", "--", "true",
    ]);
    assert!(
        text(&bare.stderr).contains("give the unit: 120m"),
        "{}",
        text(&bare.stderr)
    );
}
