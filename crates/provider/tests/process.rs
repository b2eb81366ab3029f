//! The `process` provider against real processes: a shell script stands in for `corral`.

mod support;

use std::path::Path;
use std::time::Duration;

use corral_provider::ProviderSettings as _;
use corral_provider::{
    connect, ErrorClass, InstanceState, Provider, ProviderConfig, TemplateOffer,
};
use corral_runtime::procfs;
use corral_testkit::{eventually_async, KillLeftovers};
use serde_json::json;
use support::*;

async fn provider(state: &Path, binary: &Path, options: serde_json::Value) -> Box<dyn Provider> {
    let config: ProviderConfig =
        serde_json::from_value(json!({"name": "process", "options": options})).unwrap();
    connect(&config, context("local", state, binary))
        .await
        .unwrap()
}

struct Setup {
    /// Kills what the test started, also when it fails; before the directory goes.
    _leftovers: KillLeftovers,
    _dir: tempfile::TempDir,
    state: std::path::PathBuf,
    binary: std::path::PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let binary = script(&dir.path().join("corral"), STAND_IN_AGENT);
    Setup {
        _leftovers: KillLeftovers::new(dir.path()),
        state: dir.path().join("state"),
        binary,
        _dir: dir,
    }
}

// Several threads, as in the manager: the task that reaps an agent runs while the test waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_get_their_flags_and_token_and_are_found_again_after_a_restart() {
    let s = setup();
    let p = provider(&s.state, &s.binary, json!({})).await;
    assert_eq!(
        p.templates().await.unwrap(),
        [
            TemplateOffer {
                name: "small".into(),
                slots: "cpu=1,mem=1GiB".into(),
                price_per_hour: Some(0.25)
            },
            TemplateOffer {
                name: "large".into(),
                slots: "cpu=4,mem=8GiB".into(),
                price_per_hour: Some(1.0)
            },
        ]
    );

    let launched = p.launch("small", &requests(&["a-1", "a-2"])).await.unwrap();
    let ids: Vec<_> = launched.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["a-1", "a-2"]);
    assert!(launched.iter().all(|i| i.state == InstanceState::Running
        && i.template.as_deref() == Some("small")
        && i.agent_id.as_deref() == Some(i.id.as_str())));

    let log = s.state.join("a-1/agent.log");
    let (pid, child) = stand_in_pids(&log).await;
    let work_dir = s.state.join("a-1/work");
    assert_eq!(
        log_values(&log, "arg"),
        [
            "agent",
            "--server",
            MANAGER,
            "--group",
            "local",
            "--id",
            "a-1",
            "--capacity",
            "cpu=1,mem=1GiB",
            "--label",
            "corral.io/template=small",
            "--work-dir",
            work_dir.to_str().unwrap(),
            "--runtime",
            "process",
        ]
    );
    assert!(work_dir.is_dir());
    // The token is in the environment, not on the command line that `ps` shows.
    assert_eq!(log_values(&log, "token"), ["token-of-a-1"]);
    assert!(!cmdline(pid).contains("token-of"), "{}", cmdline(pid));
    // It leads a session and process group of its own, with its child in the group.
    let stat = procfs::stat(pid).unwrap();
    assert_eq!((stat.pgrp, stat.session), (pid, pid));
    assert_eq!(procfs::stat(child).unwrap().pgrp, pid);

    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.state.join("a-1/instance.json")).unwrap()).unwrap();
    assert_eq!(record["pid"], pid);
    assert_eq!(record["start_time"], stat.start_time);
    assert_eq!(record["template"], "small");
    assert_eq!(record["agent_id"], "a-1");

    let listed = p.list().await.unwrap();
    assert_eq!(listed, launched);

    // A restarted manager: a new provider on the same state directory finds the same agents and
    // stops them, children included, without leaving zombies.
    let (pid2, child2) = stand_in_pids(&s.state.join("a-2/agent.log")).await;
    let restarted = provider(&s.state, &s.binary, json!({})).await;
    assert_eq!(restarted.list().await.unwrap(), launched);
    restarted
        .terminate(&["a-1".into(), "a-2".into(), "never-was".into()])
        .await
        .unwrap();
    for gone in [pid, child, pid2, child2] {
        assert!(!is_live(gone), "process {gone} survived terminate");
    }
    // Asked with SIGTERM, they ended on it: no SIGKILL was needed.
    for agent in ["a-1", "a-2"] {
        let log = s.state.join(agent).join("agent.log");
        assert_eq!(log_values(&log, "stopped"), ["TERM"], "{agent}");
    }
    eventually_async("the agents to be reaped", Duration::from_secs(5), || {
        std::future::ready(is_reaped(pid) && is_reaped(pid2))
    })
    .await;
    assert!(restarted.list().await.unwrap().is_empty());
    assert!(!s.state.join("a-1/instance.json").exists());
    assert!(log.exists(), "the log is kept");
    // Terminating again is fine.
    restarted.terminate(&["a-1".into()]).await.unwrap();
}

#[tokio::test]
async fn terminate_stops_the_agents_sessions_and_escalates_to_sigkill() {
    let s = setup();
    let p = provider(
        &s.state,
        &s.binary,
        json!({"runtime": "docker", "extra_args": ["--stubborn", "--with-session"]}),
    )
    .await;
    p.launch("large", &requests(&["stubborn"])).await.unwrap();
    let log = s.state.join("stubborn/agent.log");
    let (pid, child) = stand_in_pids(&log).await;
    let session: i32 = log_values(&log, "session")[0].parse().unwrap();
    let args = log_values(&log, "arg");
    assert_eq!(
        args[args.len() - 4..],
        ["--runtime", "docker", "--stubborn", "--with-session"]
    );
    // The "session" leads a process group of its own in the agent's session.
    eventually_async("the session's own group", Duration::from_secs(5), || {
        std::future::ready(
            procfs::stat(session).is_some_and(|s| s.pgrp == session && s.session == pid),
        )
    })
    .await;
    assert!(args.contains(&"cpu=4,mem=8GiB".to_string()), "{args:?}");

    p.terminate(&["stubborn".into()]).await.unwrap();
    // It was asked with SIGTERM first, and went on...
    assert_eq!(log_values(&log, "ignored"), ["TERM"]);
    assert!(log_values(&log, "stopped").is_empty());
    // ...so SIGKILL, after the grace, ended it, its child and its session, which all ignore
    // SIGTERM.
    assert!(!is_live(pid) && !is_live(child));
    assert!(!is_live(session), "a session of the agent survived");
    assert!(p.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_agent_killed_by_hand_is_listed_gone_and_its_leftovers_are_stopped() {
    let s = setup();
    let p = provider(&s.state, &s.binary, json!({})).await;
    p.launch("small", &requests(&["victim"])).await.unwrap();
    let (pid, child) = stand_in_pids(&s.state.join("victim/agent.log")).await;

    kill(pid, libc::SIGKILL);
    eventually_async("the agent to die", Duration::from_secs(5), || {
        std::future::ready(!is_live(pid))
    })
    .await;
    let listed = p.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, InstanceState::Gone);
    assert_eq!(listed[0].agent_id.as_deref(), Some("victim"));

    // Its child lives on in the agent's process group; terminate stops it.
    assert!(is_live(child));
    p.terminate(&["victim".into()]).await.unwrap();
    assert!(!is_live(child), "the orphaned child {child} survived");
    assert!(p.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn bad_templates_ids_and_binaries_fail_with_the_right_class() {
    let s = setup();
    let p = provider(&s.state, &s.binary, json!({})).await;
    let e = p.launch("huge", &requests(&["a"])).await.unwrap_err();
    assert_eq!(e.class, ErrorClass::Fatal);
    assert!(e.message.contains("huge"), "{e}");
    let e = p
        .launch("small", &requests(&["../escape"]))
        .await
        .unwrap_err();
    assert_eq!(e.class, ErrorClass::Fatal);
    assert!(e.message.contains("../escape"), "{e}");

    let missing = s.state.join("no-such-corral");
    let p = provider(&s.state, &s.binary, json!({"binary": missing})).await;
    let e = p.launch("small", &requests(&["a"])).await.unwrap_err();
    assert_eq!(e.class, ErrorClass::Fatal);
    assert!(e.message.contains("no-such-corral"), "{e}");
    assert!(p.list().await.unwrap().is_empty());
}

#[test]
fn options_are_checked_and_named() {
    for (options, field) in [
        (json!({"runtime": "podman"}), "provider.options.runtime"),
        (json!({"extra_args": "--x"}), "provider.options.extra_args"),
        (json!({"binary": "/x", "bogus": 1}), "provider.options"),
    ] {
        let config: ProviderConfig =
            serde_json::from_value(json!({"name": "process", "options": options})).unwrap();
        let e = config.validate().unwrap_err();
        assert!(e.field.starts_with(field), "{options}: {e}");
    }
}
