//! The process runtime in a process that is a child subreaper, as the agent is: the orphans of
//! sessions are reparented to it, and it kills and reaps them. A test binary of its own, as the
//! setting holds for the whole process.

use std::fs;
use std::path::Path;

use corral_runtime::{Exit, ProcessConfig, ProcessRuntime, Runtime, SessionPaths, SessionSpec};

/// Zombies whose parent is this process: what `ps -o pid,ppid,stat` would list with `Z`.
fn our_zombies() -> Vec<i32> {
    let me = std::process::id() as i32;
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            corral_runtime::procfs::stat(pid).is_some_and(|s| !s.alive() && s.ppid == me)
        })
        .collect()
}

#[tokio::test]
async fn orphans_of_a_session_come_to_the_subreaper_which_kills_and_reaps_them() {
    corral_runtime::become_subreaper().unwrap();
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = corral_testkit::KillLeftovers::new(root.path());
    let rt = Runtime::Process(ProcessRuntime::new(ProcessConfig::default()));
    let spec = SessionSpec {
        id: "orphans".into(),
        command: ["sh", "-c"]
            .into_iter()
            .map(String::from)
            .chain(["setsid sh -c 'echo $$ > escaped.pid; exec sleep 77' & \
                 ( sleep 77 & echo $! > plain.pid ) & \
                 until [ -s escaped.pid ] && [ -s plain.pid ]; do sleep 0.05; done"
                .to_string()])
            .collect(),
        ..Default::default()
    };
    rt.start(&spec, root.path()).await.unwrap();
    let work = SessionPaths::new(root.path(), "orphans").work;
    let pid_in = |file: &str| -> i32 {
        fs::read_to_string(work.join(file))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let exit = rt.wait("orphans").await.unwrap();
    let pids = [pid_in("escaped.pid"), pid_in("plain.pid")];
    assert_eq!(exit, Exit::Code(0));
    for pid in pids {
        assert!(pid > 1, "a pid file is missing");
        // Neither alive nor a zombie: killed and reaped.
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} is still in /proc: {:?}",
            corral_runtime::procfs::stat(pid)
        );
    }
    assert_eq!(our_zombies(), Vec::<i32>::new(), "zombies left unreaped");

    // With a cgroup, even a process without the cookie, orphaned at once, is killed and reaped.
    let Some(parent) = corral_testkit::cgroup2_parent() else {
        return;
    };
    let rt = Runtime::Process(ProcessRuntime::new(ProcessConfig {
        cgroup_parent: Some(parent),
        ..Default::default()
    }));
    let spec = SessionSpec {
        id: "bare".into(),
        command: vec![
            "sh".into(),
            "-c".into(),
            "( setsid env -i /bin/sh -c 'echo $$ > bare.pid; exec /bin/sleep 77' & ) ; \
             until [ -s bare.pid ]; do sleep 0.05; done"
                .into(),
        ],
        ..Default::default()
    };
    rt.start(&spec, root.path()).await.unwrap();
    let exit = rt.wait("bare").await.unwrap();
    let bare = fs::read_to_string(SessionPaths::new(root.path(), "bare").work.join("bare.pid"))
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0);
    assert_eq!(exit, Exit::Code(0));
    assert!(bare > 1, "bare.pid is missing");
    assert!(
        !Path::new(&format!("/proc/{bare}")).exists(),
        "{bare} is still in /proc: {:?}",
        corral_runtime::procfs::stat(bare)
    );
    assert_eq!(our_zombies(), Vec::<i32>::new(), "zombies left unreaped");
}
