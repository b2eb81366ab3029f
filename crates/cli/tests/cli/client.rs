//! The client subcommands as a user runs them, against a real manager (`corral server` as a
//! child process on a free port, with its own data directory).

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use common::{eventually, free_port, start_manager, Proc, CORRAL};

/// A running manager; killed when dropped, whatever the test did.
struct Manager {
    _server: Proc,
    dir: TempDir,
    addr: String,
    admin: String,
}

impl Manager {
    fn start() -> Manager {
        let dir = tempfile::tempdir().unwrap();
        let (server, port) = start_manager(dir.path(), &[], || {
            let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
            let mut command = Command::new(CORRAL);
            command
                .args(["server", "--data-dir"])
                .arg(dir.path())
                .env("RUST_LOG", "warn")
                .env_remove("CORRAL_DATABASE_URL")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            command
        });
        let admin = std::fs::read_to_string(dir.path().join("admin.token"))
            .expect("the manager wrote admin.token")
            .trim()
            .to_string();
        Manager {
            _server: server,
            dir,
            addr: format!("127.0.0.1:{port}"),
            admin,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `corral ARGS` as the admin, server and token from the environment.
    fn admin(&self, args: &[&str]) -> Run {
        self.with_token(&self.admin, args)
    }

    fn with_token(&self, token: &str, args: &[&str]) -> Run {
        run(isolated(self.dir.path())
            .env("CORRAL_SERVER", self.url())
            .env("CORRAL_TOKEN", token)
            .args(args))
    }
}

fn free_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// `corral` with no server, token or config from the person running the tests: the config file
/// is a path that does not exist, and the working directory is `cwd`.
fn isolated(cwd: &Path) -> Command {
    let mut cmd = Command::new(CORRAL);
    cmd.current_dir(cwd)
        .env("CORRAL_CONFIG", cwd.join("no-such-config.toml"))
        .env_remove("CORRAL_SERVER")
        .env_remove("CORRAL_TOKEN")
        .stdin(Stdio::null());
    cmd
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(cmd: &mut Command) -> Run {
    let out = cmd.output().expect("corral runs");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

impl Run {
    /// Standard output of a run that must succeed.
    fn ok(&self) -> &str {
        assert_eq!(
            self.code,
            Some(0),
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        &self.stdout
    }

    /// Standard error of a run that must fail with exit code 1.
    fn fails(&self) -> &str {
        assert_eq!(
            self.code,
            Some(1),
            "expected exit code 1\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        &self.stderr
    }

    fn json(&self) -> Value {
        serde_json::from_str(self.ok())
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.stdout))
    }
}

/// Waits for `session get ID` to say it is scheduled; the control loop places within ~100 ms.
fn wait_scheduled(m: &Manager, id: &str) -> String {
    let what = format!("session {id} to be placed");
    eventually(&what, Duration::from_secs(10), || {
        let out = m.admin(&["session", "get", id]).ok().to_string();
        let placed = out
            .lines()
            .any(|l| l.starts_with("state") && l.contains("scheduled"));
        if placed {
            Ok(out)
        } else {
            Err(format!("\n{out}"))
        }
    })
}

fn setup_group(m: &Manager) {
    m.admin(&[
        "group",
        "create",
        "g1",
        "--policy",
        "fixed",
        "--placement",
        "spread",
        "--head-of-line",
        "strict",
    ])
    .ok();
    m.admin(&[
        "agent",
        "register",
        "a1",
        "--group",
        "g1",
        "--capacity",
        "cpu=4,mem=8GiB,gpu=2",
        "--label",
        "rack=r1",
    ])
    .ok();
}

#[test]
fn a_submitted_session_is_placed_and_shown_with_its_history() {
    let m = Manager::start();
    let created = m
        .admin(&[
            "group",
            "create",
            "g1",
            "--policy",
            "fixed",
            "--max-nodes",
            "4",
        ])
        .ok()
        .to_string();
    assert!(
        created.contains("g1") && created.contains("0 to 4"),
        "{created}"
    );
    assert!(m
        .admin(&["group", "ls"])
        .ok()
        .lines()
        .any(|l| l.starts_with("g1 ")));

    let agent = m
        .admin(&[
            "agent",
            "register",
            "a1",
            "--group",
            "g1",
            "--capacity",
            "cpu=4,mem=8GiB,gpu=2",
        ])
        .ok()
        .to_string();
    assert!(
        agent.contains("cpu=4,gpu=2,mem=8GiB"),
        "slots print in their short form:\n{agent}"
    );

    let id = m
        .admin(&[
            "session",
            "submit",
            "--group",
            "g1",
            "--request",
            "cpu=2,mem=4GiB,gpu=0.5",
            "--env",
            "A=1",
            "--",
            "sleep",
            "60",
        ])
        .ok()
        .trim()
        .to_string();
    assert!(
        id.starts_with('s') && !id.contains(char::is_whitespace),
        "submit prints the id alone: {id:?}"
    );

    let shown = wait_scheduled(&m, &id);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("agent") && l.contains("a1")),
        "{shown}"
    );
    assert!(
        shown.contains("command") && shown.contains("sleep 60"),
        "{shown}"
    );
    assert!(
        shown.contains("HISTORY") && shown.contains("submitted"),
        "{shown}"
    );
    assert!(shown.contains("cpu=2,gpu=0.5,mem=4GiB"), "{shown}");

    let listed = m
        .admin(&["session", "ls", "--group", "g1", "--state", "scheduled"])
        .ok()
        .to_string();
    assert!(listed.contains(&id) && listed.contains("a1"), "{listed}");
    let agents = m.admin(&["agent", "ls", "--group", "g1"]).ok().to_string();
    assert!(
        agents.contains("cpu=2,gpu=0.5,mem=4GiB"),
        "the agent's allocation:\n{agents}"
    );
    let events = m.admin(&["events", "--session", &id]).ok().to_string();
    assert!(
        events.contains("placed") && events.contains("Z "),
        "RFC 3339 UTC times:\n{events}"
    );
    let shares = m.admin(&["group", "shares", "g1"]).ok().to_string();
    assert!(
        shares.contains("a1") && shares.contains("cpu=2,gpu=1.5,mem=4GiB"),
        "{shares}"
    );

    let cancelled = m.admin(&["session", "cancel", &id]).ok().to_string();
    assert!(cancelled.contains("cancelled"), "{cancelled}");
    assert!(m
        .admin(&["session", "get", &id])
        .ok()
        .contains("cancelled by admin"));
}

#[test]
fn an_infeasible_request_is_refused_with_the_reason() {
    let m = Manager::start();
    setup_group(&m);
    let refused = m.admin(&[
        "session",
        "submit",
        "--group",
        "g1",
        "--request",
        "gpu=4",
        "--",
        "train",
    ]);
    let stderr = refused.fails();
    assert!(
        stderr.contains("error: gpu=4 requested; the largest agent or template offers gpu=2"),
        "{stderr}"
    );
    assert!(
        refused.stdout.is_empty(),
        "nothing on stdout: {}",
        refused.stdout
    );
    // The same verdict, asked without submitting.
    let required = m
        .admin(&["group", "required", "g1", "--request", "gpu=4"])
        .ok()
        .to_string();
    assert!(
        required.contains("feasible  no") && required.contains("offers gpu=2"),
        "{required}"
    );
    // Device constraints are read as at submit: its GPUs are of no known model.
    let required = m
        .admin(&[
            "group",
            "required",
            "g1",
            "--request",
            "gpu=1,gpu.model=H100*",
        ])
        .ok()
        .to_string();
    assert!(
        required.contains("feasible  no")
            && required.contains("no device of the group matches its constraints"),
        "{required}"
    );
}

#[test]
fn output_json_is_the_api_answer() {
    let m = Manager::start();
    setup_group(&m);
    let submitted = m
        .admin(&[
            "session",
            "submit",
            "--group",
            "g1",
            "--request",
            "cpu=1",
            "-o",
            "json",
            "--",
            "true",
        ])
        .json();
    let id = submitted["id"].as_str().expect("an id").to_string();
    wait_scheduled(&m, &id);

    let group = m.admin(&["group", "get", "g1", "--output", "json"]).json();
    assert_eq!(group["scheduler"]["placement"], "spread");
    assert_eq!(group["scheduler"]["head_of_line"], "strict");
    let session = m.admin(&["session", "get", &id, "-o", "json"]).json();
    assert_eq!(session["state"], "scheduled");
    assert_eq!(session["agent"], "a1");
    assert!(
        session["history"].as_array().is_some_and(|h| h.len() >= 2),
        "{session}"
    );
    for args in [
        &["group", "ls", "-o", "json"][..],
        &["session", "ls", "-o", "json"],
        &["agent", "ls", "-o", "json"],
        &["agent", "get", "a1", "-o", "json"],
        &["events", "-o", "json"],
        &["group", "shares", "g1", "-o", "json"],
        &["group", "pending", "g1", "-o", "json"],
        &["group", "templates", "g1", "-o", "json"],
        &["group", "plan", "g1", "--format", "json"],
        &["image", "ls", "-o", "json"],
    ] {
        m.admin(args).json();
    }
    // The group's history: the session on a1 now, as a sparkline and in JSON.
    let table = m
        .admin(&["group", "history", "g1", "--since", "1m", "--step", "1s"])
        .ok()
        .to_string();
    let running = table
        .lines()
        .find(|l| l.starts_with("running "))
        .unwrap_or_else(|| panic!("{table}"));
    assert_eq!(running.split_whitespace().last(), Some("1"), "{table}");
    assert!(running.contains('█'), "{table}");
    let history = m.admin(&["group", "history", "g1", "-o", "json"]).json();
    let running = history["running"].as_array().expect("running");
    assert_eq!(running.last(), Some(&serde_json::json!(1)), "{history}");
    // The manager's field order is kept: `id` leads a session as the API sends it.
    let raw = m.admin(&["session", "get", &id, "-o", "json"]).stdout;
    assert!(raw.starts_with("{\n  \"id\": "), "{raw}");
}

#[test]
fn a_user_token_cannot_create_groups() {
    let m = Manager::start();
    setup_group(&m);
    let created = m.admin(&["token", "create", "bob"]);
    let secret = created.ok().trim().to_string();
    assert!(
        secret.starts_with("corral_") && !secret.contains(char::is_whitespace),
        "the secret alone: {secret:?}"
    );
    assert!(
        created.stderr.contains("not shown again"),
        "{}",
        created.stderr
    );

    let denied = m.with_token(&secret, &["group", "create", "g2"]);
    assert!(denied.fails().contains("admin"), "{}", denied.stderr);
    // A user still submits, and sees their own sessions.
    let id = m
        .with_token(
            &secret,
            &[
                "session",
                "submit",
                "--group",
                "g1",
                "--request",
                "cpu=1",
                "--",
                "true",
            ],
        )
        .ok()
        .trim()
        .to_string();
    let mine = m.with_token(&secret, &["session", "ls"]).ok().to_string();
    assert!(mine.contains(&id) && mine.contains("bob"), "{mine}");

    let admin = m
        .admin(&["token", "create", "carol", "--role", "admin", "-o", "json"])
        .json();
    assert_eq!(admin["role"], "admin");
    let carol = admin["token"].as_str().unwrap();
    m.with_token(carol, &["group", "create", "g2"]).ok();

    let bad = m.with_token("corral_nope", &["group", "ls"]);
    assert!(
        bad.fails().contains("did not accept the token"),
        "{}",
        bad.stderr
    );
}

#[test]
fn server_and_token_resolve_from_flags_then_environment_then_the_config_file() {
    let m = Manager::start();
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    let write = |server: &str, token: &str| {
        std::fs::write(
            &config,
            format!("server = \"{server}\"\ntoken = \"{token}\"\n"),
        )
        .unwrap();
    };
    let corral = |args: &[&str]| {
        let mut cmd = isolated(home.path());
        cmd.env("CORRAL_CONFIG", &config).args(args);
        cmd
    };

    // The config file alone.
    write(&m.url(), &m.admin);
    run(&mut corral(&["group", "create", "from-config"])).ok();

    // The environment wins over the file, the flag over both.
    write(&m.url(), "corral_wrong");
    run(corral(&["group", "ls"]).env("CORRAL_TOKEN", &m.admin)).ok();
    run(corral(&["group", "ls", "--token", &m.admin]).env("CORRAL_TOKEN", "corral_wrong")).ok();
    assert!(run(&mut corral(&["group", "ls"]))
        .fails()
        .contains("did not accept the token"));

    let dead = format!("http://{}", free_addr());
    write(&dead, &m.admin);
    run(corral(&["group", "ls"]).env("CORRAL_SERVER", m.url())).ok();
    run(corral(&["group", "ls", "--server", &m.url()]).env("CORRAL_SERVER", &dead)).ok();
    let unreachable = run(&mut corral(&["group", "ls"]));
    assert!(
        unreachable
            .fails()
            .contains(&format!("cannot reach the manager at {dead}")),
        "{}",
        unreachable.stderr
    );

    // A malformed file is named.
    std::fs::write(&config, "tokn = 1\n").unwrap();
    let bad = run(&mut corral(&["group", "ls"]));
    assert!(bad.fails().contains("config.toml"), "{}", bad.stderr);
}

#[test]
fn without_a_token_the_error_says_how_to_pass_one_and_never_reads_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let plain = run(isolated(dir.path()).args(["group", "ls"]));
    let stderr = plain.fails();
    assert!(
        stderr.contains("--token") && stderr.contains("CORRAL_TOKEN"),
        "{stderr}"
    );
    assert!(!stderr.contains("admin.token"), "{stderr}");

    // A manager's data directory here is pointed out, not used.
    std::fs::create_dir(dir.path().join("corral-data")).unwrap();
    std::fs::write(
        dir.path().join("corral-data/admin.token"),
        "corral_secret\n",
    )
    .unwrap();
    let hinted = run(isolated(dir.path()).args(["session", "ls"]));
    let stderr = hinted.fails();
    assert!(
        stderr.contains("corral-data/admin.token") && !stderr.contains("corral_secret"),
        "{stderr}"
    );
}

#[test]
fn an_unreachable_server_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let out =
        run(isolated(dir.path()).args(["agent", "ls", "--server", &addr, "--token", "corral_x"]));
    assert!(
        out.fails()
            .contains(&format!("cannot reach the manager at http://{addr}")),
        "{}",
        out.stderr
    );
}

#[test]
fn set_policy_changes_only_the_settings_given() {
    let m = Manager::start();
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.json");
    std::fs::write(
        &group,
        r#"{"name": "g1", "policy": {"kind": "demand", "max_nodes": 3, "cooldown_secs": 5},
            "templates": [{"name": "small", "slots": "cpu=2,mem=4GiB", "price": 0.1, "max": 5}]}"#,
    )
    .unwrap();
    m.admin(&[
        "group",
        "create",
        "g1",
        "--file",
        path(&group),
        "--scheduler",
        "priority",
    ])
    .ok();
    m.admin(&[
        "group",
        "set-policy",
        "g1",
        "--min-nodes",
        "1",
        "--headroom",
        "cpu=2",
    ])
    .ok();

    let g = m.admin(&["group", "get", "g1", "-o", "json"]).json();
    assert_eq!(g["policy"]["kind"], "demand");
    assert_eq!(g["policy"]["max_nodes"], 3);
    assert_eq!(g["policy"]["cooldown_secs"], 5);
    assert_eq!(g["policy"]["min_nodes"], 1);
    assert_eq!(g["policy"]["headroom"]["cpu"], "2");
    assert_eq!(g["scheduler"]["sequencer"], "priority");
    assert_eq!(g["templates"][0]["name"], "small");

    let templates = dir.path().join("templates.json");
    std::fs::write(
        &templates,
        r#"[{"name": "big", "slots": {"cpu": 8, "gpu": 1}, "max": 2}]"#,
    )
    .unwrap();
    m.admin(&["group", "templates", "g1", "--file", path(&templates)])
        .ok();
    let shown = m.admin(&["group", "templates", "g1"]).ok().to_string();
    assert!(
        shown.contains("big") && shown.contains("cpu=8,gpu=1") && !shown.contains("small"),
        "{shown}"
    );

    let missing = m.admin(&["group", "get", "nope"]);
    assert!(
        missing
            .fails()
            .starts_with("error: group \"nope\" not found"),
        "{}",
        missing.stderr
    );
    let plan = m.admin(&["group", "plan", "g1"]).ok().to_string();
    assert!(
        plan.starts_with("launch") && plan.contains("sessions"),
        "{plan}"
    );
    // min_nodes 1 made the demand policy launch, which the static provider cannot: the
    // instance fails, saying why, and the template backs off.
    let failed = eventually("a failed launch", Duration::from_secs(20), || {
        let all = m
            .admin(&["group", "instances", "g1", "--all", "-o", "json"])
            .json();
        all["instances"]
            .as_array()
            .and_then(|l| l.iter().find(|i| i["phase"] == "failed"))
            .cloned()
            .ok_or(all)
    });
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .contains("static provider cannot launch"),
        "{failed}"
    );
    let shown = m.admin(&["group", "instances", "g1"]).ok().to_string();
    let held = shown
        .lines()
        .find(|l| l.starts_with("held: "))
        .unwrap_or("");
    assert!(
        held.starts_with("held: small:") && held.contains("backs off for"),
        "{shown}"
    );
    // An agent makes the group in use.
    m.admin(&[
        "agent",
        "register",
        "a9",
        "--group",
        "g1",
        "--capacity",
        "cpu=1",
    ])
    .ok();
    assert!(m
        .admin(&["group", "delete", "g1"])
        .fails()
        .contains("in use"));
    m.admin(&["group", "create", "empty"]).ok();
    assert!(m
        .admin(&["group", "delete", "empty"])
        .ok()
        .contains("deleted group empty"));
    assert!(m
        .admin(&["group", "get", "empty"])
        .fails()
        .contains("not found"));
}

#[test]
fn images_agents_and_drains() {
    let m = Manager::start();
    setup_group(&m);
    m.admin(&["image", "put", "python", "--min-slots", "mem=1GiB"])
        .ok();
    assert!(m.admin(&["image", "ls"]).ok().contains("mem=1GiB"));
    let id = m
        .admin(&[
            "session",
            "submit",
            "--group",
            "g1",
            "--image",
            "python",
            "--request",
            "cpu=1",
        ])
        .ok()
        .trim()
        .to_string();
    wait_scheduled(&m, &id);
    let shown = m.admin(&["session", "get", &id]).ok().to_string();
    assert!(
        shown.contains("cpu=1,mem=1GiB"),
        "the image's minimum applies:\n{shown}"
    );

    let drained = m.admin(&["agent", "drain", "a1"]).ok().to_string();
    assert!(drained.contains("marked (drained)"), "{drained}");
    let unmarked = m.admin(&["agent", "unmark", "a1", "-o", "json"]).json();
    assert_eq!(unmarked["state"], "alive");

    m.admin(&["session", "cancel", &id]).ok();
    m.admin(&["image", "delete", "python"]).ok();
    assert!(m
        .admin(&["image", "ls", "-o", "json"])
        .json()
        .as_array()
        .is_some_and(Vec::is_empty));
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}
