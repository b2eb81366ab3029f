//! Running a command inside a running session of the process runtime (issue 46), for real on
//! this host: on pipes and on a terminal, with the session's environment, work directory and
//! cgroup; its input's end, its terminal's size; a stop of the session ends it too.

use std::fs;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use corral_runtime::sandbox::{Isolation, SandboxConfig};
use corral_runtime::{
    ExecRequest, Exit, ProcessConfig, ProcessRuntime, Runtime, RuntimeError, SessionPaths,
    SessionSpec,
};
use corral_testkit::KillLeftovers;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// How long a test waits for what should come at once, before it fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(20);

fn runtime() -> Runtime {
    Runtime::Process(ProcessRuntime::new(ProcessConfig::default()))
}

fn sh(id: &str, script: &str) -> SessionSpec {
    SessionSpec {
        id: id.to_string(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        ..Default::default()
    }
}

fn on_pipes(command: &[&str]) -> ExecRequest {
    ExecRequest {
        command: command.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn on_terminal(command: &[&str], cols: u16, rows: u16) -> ExecRequest {
    ExecRequest {
        tty: true,
        cols,
        rows,
        ..on_pipes(command)
    }
}

/// Everything a stream gives until its end.
async fn to_end(stream: &mut Pin<Box<dyn AsyncRead + Send>>) -> String {
    let mut text = String::new();
    tokio::time::timeout(PATIENCE, stream.read_to_string(&mut text))
        .await
        .expect("the stream did not end")
        .unwrap();
    text
}

async fn exit_of(exit: Pin<Box<dyn Future<Output = Exit> + Send>>) -> Exit {
    tokio::time::timeout(PATIENCE, exit)
        .await
        .expect("the command did not end")
}

/// Starts a session that runs until stopped, once it wrote `ready` (its script's last step
/// before it sleeps) into its work directory.
async fn running(rt: &Runtime, root: &Path, spec: &SessionSpec) {
    rt.start(spec, root).await.unwrap();
    let work = SessionPaths::new(root, &spec.id).work;
    corral_testkit::eventually_async("the session is ready", PATIENCE, || {
        std::future::ready(work.join("ready").exists())
    })
    .await;
}

fn sleeper(id: &str) -> SessionSpec {
    sh(id, "touch ready; exec sleep 600")
}

#[tokio::test]
async fn a_command_on_pipes_reads_writes_and_exits() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    let spec = sleeper("pipes");
    running(&rt, root.path(), &spec).await;
    let request = on_pipes(&["sh", "-c", "read x; echo got $x; echo err >&2; exit 3"]);
    let mut exec = rt.exec(&spec, root.path(), &request).await.unwrap();
    exec.stdin.write_all(b"hi\n").await.unwrap();
    let mut stderr = exec.stderr.take().expect("a stderr without a terminal");
    let (out, err) = tokio::join!(to_end(&mut exec.stdout), to_end(&mut stderr));
    assert_eq!(out, "got hi\n");
    assert_eq!(err, "err\n");
    // Without a terminal, a resize does nothing.
    exec.resizer.resize(100, 30).await.unwrap();
    assert_eq!(exit_of(exec.exit).await, Exit::Code(3));
    rt.stop("pipes", Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_command_has_the_session_environment_and_work_dir() {
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    let mut spec = sh(
        "environ",
        "env | sort > env.new && mv env.new env.txt; touch ready; exec sleep 600",
    );
    spec.environment.insert("GREETING".into(), "hello".into());
    running(&rt, root.path(), &spec).await;
    let request = on_pipes(&["sh", "-c", "pwd; env | sort"]);
    let mut exec = rt.exec(&spec, root.path(), &request).await.unwrap();
    drop(exec.stdin);
    let out = to_end(&mut exec.stdout).await;
    let work = fs::canonicalize(SessionPaths::new(root.path(), "environ").work).unwrap();
    let (pwd, env) = out.split_once('\n').unwrap();
    assert_eq!(pwd, work.display().to_string());
    // The same variables as the session's own processes, its cookie among them.
    let session_env = fs::read_to_string(work.join("env.txt")).unwrap();
    assert_eq!(env, session_env);
    assert!(env.contains("\nGREETING=hello\n"), "{env}");
    assert!(env.contains("\nCORRAL_SESSION_COOKIE="), "{env}");
    assert!(env.contains("\nCORRAL_SESSION_ID=environ\n"), "{env}");
    rt.stop("environ", Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn dropping_stdin_ends_the_input() {
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    let spec = sleeper("eof");
    running(&rt, root.path(), &spec).await;

    let mut exec = rt
        .exec(&spec, root.path(), &on_pipes(&["cat"]))
        .await
        .unwrap();
    exec.stdin.write_all(b"one\ntwo\n").await.unwrap();
    drop(exec.stdin);
    assert_eq!(to_end(&mut exec.stdout).await, "one\ntwo\n");
    assert_eq!(exit_of(exec.exit).await, Exit::Code(0));

    // On a terminal, which reads lines: its end-of-file character.
    let request = on_terminal(&["cat"], 0, 0);
    let mut exec = rt.exec(&spec, root.path(), &request).await.unwrap();
    exec.stdin.write_all(b"three\n").await.unwrap();
    drop(exec.stdin);
    // The terminal's echo, then cat's copy.
    assert_eq!(to_end(&mut exec.stdout).await, "three\r\nthree\r\n");
    assert_eq!(exit_of(exec.exit).await, Exit::Code(0));
    rt.stop("eof", Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn no_command_is_a_login_shell() {
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    let spec = sleeper("shell");
    running(&rt, root.path(), &spec).await;
    let mut exec = rt.exec(&spec, root.path(), &on_pipes(&[])).await.unwrap();
    exec.stdin
        .write_all(b"echo shell $0; exit 7\n")
        .await
        .unwrap();
    let out = to_end(&mut exec.stdout).await;
    let shell = if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    // After what the login profile prints.
    assert!(out.ends_with(&format!("shell {shell}\n")), "{out:?}");
    assert_eq!(exit_of(exec.exit).await, Exit::Code(7));
    rt.stop("shell", Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_command_on_a_terminal_has_its_size_and_is_resized() {
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    let spec = sleeper("tty");
    running(&rt, root.path(), &spec).await;

    let request = on_terminal(&["sh", "-c", "stty size; tty; exit 5"], 80, 24);
    let mut exec = rt.exec(&spec, root.path(), &request).await.unwrap();
    assert!(exec.stderr.is_none(), "a terminal has one stream");
    let out = to_end(&mut exec.stdout).await;
    let lines: Vec<&str> = out.split("\r\n").collect();
    assert_eq!(lines[0], "24 80", "{out:?}");
    assert!(lines[1].starts_with("/dev/pts/"), "{out:?}");
    assert_eq!(exit_of(exec.exit).await, Exit::Code(5));

    let request = on_terminal(&["sh", "-c", "read x; stty size"], 80, 24);
    let mut exec = rt.exec(&spec, root.path(), &request).await.unwrap();
    exec.resizer.resize(132, 50).await.unwrap();
    exec.stdin.write_all(b"go\n").await.unwrap();
    assert_eq!(to_end(&mut exec.stdout).await, "go\r\n50 132\r\n");
    assert_eq!(exit_of(exec.exit).await, Exit::Code(0));
    rt.stop("tty", Duration::from_secs(5)).await.unwrap();
}

/// No descriptor of the agent reaches the command: `ls` sees its 0, 1, 2, the directory it
/// lists, and what any child of the test inherits from the test's own parent.
#[tokio::test]
async fn a_command_inherits_no_descriptor_of_the_agent() {
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    let spec = sleeper("fds");
    running(&rt, root.path(), &spec).await;
    let list = ["sh", "-c", "exec ls -1 /proc/self/fd"];
    let any_child = std::process::Command::new(list[0])
        .args(&list[1..])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let any_child = String::from_utf8(any_child.stdout).unwrap();
    assert!(any_child.starts_with("0\n1\n"), "{any_child}");
    let mut exec = rt.exec(&spec, root.path(), &on_pipes(&list)).await.unwrap();
    assert_eq!(to_end(&mut exec.stdout).await, any_child);
    let request = on_terminal(&list, 0, 0);
    let mut exec = rt.exec(&spec, root.path(), &request).await.unwrap();
    assert_eq!(
        to_end(&mut exec.stdout).await,
        any_child.replace('\n', "\r\n")
    );
    rt.stop("fds", Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn stopping_the_session_ends_its_commands() {
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    let spec = sleeper("stopped");
    running(&rt, root.path(), &spec).await;
    let on_pipes = rt
        .exec(&spec, root.path(), &on_pipes(&["sleep", "600"]))
        .await
        .unwrap();
    let on_terminal = rt
        .exec(&spec, root.path(), &on_terminal(&["sleep", "600"], 0, 0))
        .await
        .unwrap();
    rt.stop("stopped", Duration::from_secs(5)).await.unwrap();
    assert_eq!(exit_of(on_pipes.exit).await, Exit::Signal(libc::SIGTERM));
    assert_eq!(exit_of(on_terminal.exit).await, Exit::Signal(libc::SIGTERM));
}

#[tokio::test]
async fn nothing_runs_in_a_session_that_does_not_run() {
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    let request = on_pipes(&["true"]);
    let err = rt
        .exec(&sh("never", "true"), root.path(), &request)
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::NotRunning(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "session never is not running on this agent"
    );

    let spec = sh("ended", "true");
    rt.start(&spec, root.path()).await.unwrap();
    assert_eq!(rt.wait("ended").await.unwrap(), Exit::Code(0));
    let err = rt.exec(&spec, root.path(), &request).await.unwrap_err();
    assert!(matches!(err, RuntimeError::NotRunning(_)), "{err}");
}

#[tokio::test]
async fn a_command_runs_in_the_session_cgroup() {
    let Some(parent) = corral_testkit::cgroup2_parent() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = Runtime::Process(ProcessRuntime::new(ProcessConfig {
        cgroup_parent: Some(parent),
        ..Default::default()
    }));
    let spec = sleeper("cgexec");
    running(&rt, root.path(), &spec).await;
    let request = on_pipes(&["cat", "/proc/self/cgroup"]);
    let mut exec = rt.exec(&spec, root.path(), &request).await.unwrap();
    let text = to_end(&mut exec.stdout).await;
    let unified = text.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    assert!(unified.ends_with("/corral-cgexec"), "{text}");
    rt.stop("cgexec", Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_sandboxed_session_is_refused_for_now() {
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    if let Err(why) = corral_runtime::sandbox::available(root.path()) {
        corral_testkit::skip(&format!("this host cannot sandbox sessions: {why}"));
        return;
    }
    let rt = Runtime::Process(ProcessRuntime::new(ProcessConfig {
        sandbox: SandboxConfig {
            isolation: Isolation::On,
            ..SandboxConfig::default()
        },
        ..Default::default()
    }));
    let spec = sleeper("boxed");
    running(&rt, root.path(), &spec).await;
    let err = rt
        .exec(&spec, root.path(), &on_pipes(&["true"]))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Unsupported { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "session boxed: exec into a sandboxed session is not supported yet"
    );
    rt.stop("boxed", Duration::from_secs(5)).await.unwrap();
}
