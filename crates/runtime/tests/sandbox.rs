//! The process runtime's sandbox (issue 43, items 4 and 10), run for real on this host: what a
//! session can see of the agent and of another session.

use std::fs;
use std::path::Path;
use std::time::Duration;

use corral_runtime::sandbox::{Isolation, SandboxConfig};
use corral_runtime::{Exit, ProcessConfig, ProcessRuntime, Runtime, SessionPaths, SessionSpec};
use corral_testkit::KillLeftovers;

fn sandboxed(hide: &[&Path]) -> Runtime {
    // As the agent is (every `corral` process makes itself so): not dumpable.
    // SAFETY: prctl with PR_SET_DUMPABLE reads no memory of ours.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) }, 0);
    Runtime::Process(ProcessRuntime::new(ProcessConfig {
        sandbox: SandboxConfig {
            isolation: Isolation::On,
            hide: hide.iter().map(|p| p.to_path_buf()).collect(),
            ..SandboxConfig::default()
        },
        ..Default::default()
    }))
}

fn sh(id: &str, script: &str) -> SessionSpec {
    SessionSpec {
        id: id.to_string(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        ..Default::default()
    }
}

fn log(root: &Path, id: &str) -> String {
    let paths = SessionPaths::new(root, id);
    let out = fs::read_to_string(&paths.stdout).unwrap_or_default();
    let err = fs::read_to_string(&paths.stderr).unwrap_or_default();
    format!("{out}{err}")
}

/// What a user of a shared agent must be able to count on: another session's files, the
/// agent's files and process, and what the operator hid are out of reach; its own working
/// directory and inputs are there; `/tmp` is its own.
#[tokio::test]
async fn a_session_sees_neither_the_agent_nor_another_session() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let root = dir.path().join("agent");
    let secret = dir.path().join("pilots");
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(&secret).unwrap();
    fs::write(secret.join("token"), "corral_secret").unwrap();
    // What the agent keeps beside its sessions.
    fs::write(root.join("agent-state"), "the agent's").unwrap();
    let rt = sandboxed(&[&secret]);

    // The first session writes a file of its own and one in /tmp, then waits to be stopped.
    let first = SessionPaths::new(&root, "first");
    rt.start(
        &sh(
            "first",
            "echo private > mine.txt; echo first > /tmp/shared.txt; touch ready; sleep 100",
        ),
        &root,
    )
    .await
    .unwrap();
    corral_testkit::eventually_async(
        "the first session to be ready",
        Duration::from_secs(10),
        || std::future::ready(first.work.join("ready").exists()),
    )
    .await;

    // The second one was given an input, and looks at everything else.
    let second = SessionPaths::new(&root, "second");
    fs::create_dir_all(&second.work).unwrap();
    fs::write(second.work.join("input.txt"), "its input").unwrap();
    let agent_pid = std::process::id();
    let script = format!(
        "cat input.txt; echo; \
         cat {first}/mine.txt 2>/dev/null || echo 'other session: hidden'; \
         cat {root}/agent-state 2>/dev/null || echo 'agent files: hidden'; \
         cat {secret}/token 2>/dev/null || echo 'hidden path: hidden'; \
         cat /proc/{agent_pid}/environ 2>/dev/null || echo 'agent process: hidden'; \
         cat /tmp/shared.txt 2>/dev/null || echo 'tmp: its own'; \
         echo \"pid $$\"",
        first = first.work.display(),
        root = root.display(),
        secret = secret.display(),
    );
    rt.start(&sh("second", &script), &root).await.unwrap();
    assert_eq!(rt.wait("second").await.unwrap(), Exit::Code(0));
    assert_eq!(
        log(&root, "second"),
        "its input\nother session: hidden\nagent files: hidden\nhidden path: hidden\n\
         agent process: hidden\ntmp: its own\npid 2\n"
    );
    // The agent still sees the session's files, and its files are where it left them.
    assert_eq!(
        fs::read_to_string(first.work.join("mine.txt")).unwrap(),
        "private\n"
    );
    assert_eq!(
        fs::read_to_string(secret.join("token")).unwrap(),
        "corral_secret"
    );

    // A stop reaches the program (process 2 of its namespace), which ends by SIGTERM.
    rt.stop("first", Duration::from_secs(5)).await.unwrap();
    assert_eq!(rt.wait("first").await.unwrap(), Exit::Signal(15));
}

/// An exit code and a death by a signal come back as the program gave them.
#[tokio::test]
async fn a_sandboxed_session_ends_as_its_program_did() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let rt = sandboxed(&[]);
    rt.start(&sh("code", "echo out; exit 7"), dir.path())
        .await
        .unwrap();
    rt.start(&sh("killed", "kill -9 $$"), dir.path())
        .await
        .unwrap();
    assert_eq!(rt.wait("code").await.unwrap(), Exit::Code(7));
    assert_eq!(log(dir.path(), "code"), "out\n");
    assert_eq!(rt.wait("killed").await.unwrap(), Exit::Signal(9));
}

/// An agent running as root runs sessions under uids of their own, one per running session
/// (so they cannot read or signal each other); an agent of an ordinary account runs them as
/// itself.
#[tokio::test]
async fn running_sessions_have_uids_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let rt = sandboxed(&[]);
    let root = corral_runtime::sandbox::is_root();
    for id in ["one", "two"] {
        rt.start(&sh(id, "id -u; id -G; touch ready; sleep 100"), dir.path())
            .await
            .unwrap();
    }
    for id in ["one", "two"] {
        let ready = SessionPaths::new(dir.path(), id).work.join("ready");
        corral_testkit::eventually_async("both sessions", Duration::from_secs(10), || {
            std::future::ready(ready.exists())
        })
        .await;
    }
    let ids: Vec<(u32, String)> = ["one", "two"]
        .iter()
        .map(|id| {
            let text = log(dir.path(), id);
            let mut lines = text.lines();
            let uid = lines.next().unwrap().trim().parse().unwrap();
            (uid, lines.next().unwrap_or_default().trim().to_string())
        })
        .collect();
    if root {
        let first = corral_runtime::sandbox::DEFAULT_FIRST_UID;
        assert!(ids.iter().all(|(uid, _)| *uid >= first), "{ids:?}");
        assert_ne!(ids[0].0, ids[1].0, "two running sessions share a uid");
        // No supplementary group of root's: the one group is its own.
        for (uid, groups) in &ids {
            assert_eq!(groups, &uid.to_string());
        }
    } else {
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        assert!(ids.iter().all(|(uid, _)| *uid == me), "{ids:?}");
    }
    for id in ["one", "two"] {
        rt.stop(id, Duration::from_secs(5)).await.unwrap();
    }
}
