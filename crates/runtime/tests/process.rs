//! The process runtime, run for real on this host.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_testkit::KillLeftovers;

use corral_core::{DeviceGrant, Quantity, SlotName};
use corral_runtime::{
    Exit, Limits, ProcessConfig, ProcessRuntime, Runtime, RuntimeError, SessionPaths, SessionSpec,
};

fn runtime() -> Runtime {
    Runtime::Process(ProcessRuntime::new(ProcessConfig::default()))
}

fn spec(id: &str, command: &[&str]) -> SessionSpec {
    SessionSpec {
        id: id.to_string(),
        command: command.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn sh(id: &str, script: &str) -> SessionSpec {
    spec(id, &["sh", "-c", script])
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Live processes whose working directory is `dir`: what `ls -l /proc/*/cwd` would show.
fn processes_in(dir: &Path) -> Vec<i32> {
    let dir = fs::canonicalize(dir).unwrap();
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| fs::read_link(format!("/proc/{pid}/cwd")).ok().as_deref() == Some(&dir))
        .filter(|pid| {
            // Not a zombie: field 3 of stat, after the command name in parentheses.
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
                .unwrap_or(false)
        })
        .collect()
}

/// Whether `pid` is a live process (not a zombie): what `ps -p PID` would show.
fn alive(pid: i32) -> bool {
    corral_runtime::procfs::stat(pid).is_some_and(|s| s.alive())
}

/// The pid a session's script wrote into `file` of its work directory.
fn pid_in(work: &Path, file: &str) -> i32 {
    let text = read(&work.join(file));
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{file}: {text:?}"))
}

/// Waits (10 s at most) for `check` to hold.
async fn eventually(what: &str, check: impl FnMut() -> bool) {
    let mut check = check;
    corral_testkit::eventually_async(
        what,
        Duration::from_secs(10),
        || std::future::ready(check()),
    )
    .await
}

#[tokio::test]
async fn exit_code_and_logs() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    rt.start(&sh("exit3", "echo hi; echo err >&2; exit 3"), root.path())
        .await
        .unwrap();
    assert_eq!(rt.wait("exit3").await.unwrap(), Exit::Code(3));
    // A second wait answers at once with the same exit.
    assert_eq!(rt.wait("exit3").await.unwrap(), Exit::Code(3));
    let paths = SessionPaths::new(root.path(), "exit3");
    assert_eq!(read(&paths.stdout), "hi\n");
    assert_eq!(read(&paths.stderr), "err\n");
    assert!(rt.running(root.path()).await.unwrap().is_empty());
}

#[tokio::test]
async fn runs_in_the_work_dir_with_staged_inputs() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let paths = SessionPaths::new(root.path(), "inputs");
    fs::create_dir_all(&paths.work).unwrap();
    fs::write(paths.work.join("input.txt"), "staged\n").unwrap();
    let rt = runtime();
    rt.start(
        &sh("inputs", "cat input.txt; pwd; read x || echo no-stdin"),
        root.path(),
    )
    .await
    .unwrap();
    assert_eq!(rt.wait("inputs").await.unwrap(), Exit::Code(0));
    let work = fs::canonicalize(&paths.work).unwrap();
    assert_eq!(
        read(&paths.stdout),
        format!("staged\n{}\nno-stdin\n", work.display())
    );
}

#[tokio::test]
async fn environment_is_exactly_the_given_one() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let mut s = spec("env", &["env"]);
    s.environment
        .insert("GREETING".into(), "hello world".into());
    s.environment.insert("EMPTY".into(), String::new());
    let rt = runtime();
    rt.start(&s, root.path()).await.unwrap();
    assert_eq!(rt.wait("env").await.unwrap(), Exit::Code(0));
    let paths = SessionPaths::new(root.path(), "env");
    let mut lines: BTreeSet<String> = read(&paths.stdout).lines().map(str::to_string).collect();
    // The cookie that marks the session's processes: random, 128 bits in hex.
    let cookie = lines
        .iter()
        .find_map(|l| l.strip_prefix("CORRAL_SESSION_COOKIE="))
        .expect("no CORRAL_SESSION_COOKIE")
        .to_string();
    assert!(
        cookie.len() == 32 && cookie.bytes().all(|b| b.is_ascii_hexdigit()),
        "{cookie}"
    );
    lines.remove(&format!("CORRAL_SESSION_COOKIE={cookie}"));
    let work = std::path::absolute(&paths.work).unwrap();
    let expected: BTreeSet<String> = [
        "GREETING=hello world".to_string(),
        "EMPTY=".to_string(),
        format!("PATH={}", corral_runtime::DEFAULT_PATH),
        format!("HOME={}", work.display()),
        "CORRAL_SESSION_ID=env".to_string(),
        // No GPU granted: none visible.
        "CUDA_VISIBLE_DEVICES=".to_string(),
        "NVIDIA_VISIBLE_DEVICES=".to_string(),
        "CORRAL_GPU_SHARES=".to_string(),
    ]
    .into();
    assert_eq!(lines, expected, "the agent's environment leaked in");
    // The test process has variables of its own (cargo's at least); none reached the session.
    assert!(std::env::vars().any(|(k, _)| k.starts_with("CARGO")));
}

fn gpu(id: &str, share_milli: u64) -> DeviceGrant {
    DeviceGrant {
        id: id.into(),
        kind: SlotName::new("gpu").unwrap(),
        share: Quantity::from_milli(share_milli),
        memory: Quantity::ZERO,
    }
}

/// The device variables a session saw, as `env` printed them (`None`: unset).
fn device_variables(stdout: &str) -> [Option<&str>; 3] {
    [
        "CUDA_VISIBLE_DEVICES=",
        "NVIDIA_VISIBLE_DEVICES=",
        "CORRAL_GPU_SHARES=",
    ]
    .map(|name| stdout.lines().find_map(|l| l.strip_prefix(name)))
}

#[tokio::test]
async fn a_session_sees_exactly_its_granted_gpus() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();

    let mut granted = spec("gpus", &["env"]);
    granted.devices = vec![
        gpu("GPU-7c3f9a1e-2d4b-4f86-b5e0-8a6c1d9e3f27", 1000),
        gpu("MIG-c7384736-a75d-5afc-978f-d2f1294409fd", 500),
    ];
    // What the session says of these variables does not widen its grant.
    granted
        .environment
        .insert("CUDA_VISIBLE_DEVICES".into(), "all".into());
    granted
        .environment
        .insert("NVIDIA_VISIBLE_DEVICES".into(), "all".into());
    rt.start(&granted, root.path()).await.unwrap();
    assert_eq!(rt.wait("gpus").await.unwrap(), Exit::Code(0));
    let out = read(&SessionPaths::new(root.path(), "gpus").stdout);
    let ids = "GPU-7c3f9a1e-2d4b-4f86-b5e0-8a6c1d9e3f27,MIG-c7384736-a75d-5afc-978f-d2f1294409fd";
    let shares =
        "GPU-7c3f9a1e-2d4b-4f86-b5e0-8a6c1d9e3f27=1,MIG-c7384736-a75d-5afc-978f-d2f1294409fd=0.5";
    assert_eq!(
        device_variables(&out),
        [Some(ids), Some(ids), Some(shares)],
        "{out}"
    );

    // No grant: set, and empty, whatever the session said.
    let mut none = spec("nogpu", &["env"]);
    none.environment
        .insert("CUDA_VISIBLE_DEVICES".into(), "0".into());
    rt.start(&none, root.path()).await.unwrap();
    assert_eq!(rt.wait("nogpu").await.unwrap(), Exit::Code(0));
    let out = read(&SessionPaths::new(root.path(), "nogpu").stdout);
    assert_eq!(
        device_variables(&out),
        [Some(""), Some(""), Some("")],
        "{out}"
    );

    // A grant whose id would break the lists is refused, naming it.
    let mut bad = spec("badgpu", &["env"]);
    bad.devices = vec![gpu("GPU-a,GPU-b", 1000)];
    let err = rt.start(&bad, root.path()).await.unwrap_err();
    assert!(
        matches!(&err, RuntimeError::InvalidSpec { reason, .. } if reason.contains("GPU-a,GPU-b")),
        "{err}"
    );
}

#[tokio::test]
async fn stop_kills_the_whole_process_group() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    rt.start(&sh("stopme", "sleep 100 & sleep 100"), root.path())
        .await
        .unwrap();
    let work = SessionPaths::new(root.path(), "stopme").work;
    // The shell and its two sleeps.
    eventually("three processes", || processes_in(&work).len() == 3).await;
    assert_eq!(rt.running(root.path()).await.unwrap(), vec!["stopme"]);
    rt.stop("stopme", Duration::from_secs(5)).await.unwrap();
    assert_eq!(rt.wait("stopme").await.unwrap(), Exit::Signal(15));
    assert_eq!(processes_in(&work), Vec::<i32>::new(), "processes left");
    assert!(rt.running(root.path()).await.unwrap().is_empty());
    // Stopping an ended session is no error.
    rt.stop("stopme", Duration::from_secs(1)).await.unwrap();
}

#[tokio::test]
async fn stop_kills_after_the_grace_what_ignores_sigterm() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    // An ignored signal stays ignored in children: neither the shell nor sleep ends on SIGTERM.
    rt.start(
        &sh("stubborn", "trap '' TERM; sleep 100; true"),
        root.path(),
    )
    .await
    .unwrap();
    let work = SessionPaths::new(root.path(), "stubborn").work;
    eventually("two processes", || processes_in(&work).len() == 2).await;
    let began = Instant::now();
    rt.stop("stubborn", Duration::from_millis(500))
        .await
        .unwrap();
    assert!(began.elapsed() >= Duration::from_millis(500));
    assert_eq!(rt.wait("stubborn").await.unwrap(), Exit::Signal(9));
    assert_eq!(processes_in(&work), Vec::<i32>::new(), "processes left");
}

#[tokio::test]
async fn what_a_session_leaves_behind_is_killed_when_it_ends() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    rt.start(&sh("leaves", "sleep 100 & echo started"), root.path())
        .await
        .unwrap();
    assert_eq!(rt.wait("leaves").await.unwrap(), Exit::Code(0));
    let work = SessionPaths::new(root.path(), "leaves").work;
    assert_eq!(processes_in(&work), Vec::<i32>::new(), "processes left");
}

/// Issue 9: `setsid` takes a process out of the session's process group and session; it must
/// not outlive the session anyway.
#[tokio::test]
async fn a_setsid_child_does_not_outlive_its_session() {
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    rt.start(
        &sh(
            "escapes",
            "setsid sh -c 'echo $$ > escaped.pid; exec sleep 77' & \
             until [ -s escaped.pid ]; do sleep 0.05; done",
        ),
        root.path(),
    )
    .await
    .unwrap();
    assert_eq!(rt.wait("escapes").await.unwrap(), Exit::Code(0));
    let work = SessionPaths::new(root.path(), "escapes").work;
    let escaped = pid_in(&work, "escaped.pid");
    assert!(
        !alive(escaped),
        "the setsid'd sleep 77 ({escaped}) outlived its session"
    );
    assert_eq!(processes_in(&work), Vec::<i32>::new(), "processes left");
}

/// Issue 9: a daemon that double-forks (the classic fork, setsid, fork) and one that only
/// forks twice are orphans when the session ends; neither outlives it.
#[tokio::test]
async fn a_double_forked_daemon_does_not_outlive_its_session() {
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    rt.start(
        &sh(
            "daemons",
            "( setsid sh -c 'sleep 77 & echo $! > daemon.pid' & ) ; \
             ( sleep 77 & echo $! > plain.pid ) & \
             until [ -s daemon.pid ] && [ -s plain.pid ]; do sleep 0.05; done",
        ),
        root.path(),
    )
    .await
    .unwrap();
    assert_eq!(rt.wait("daemons").await.unwrap(), Exit::Code(0));
    let work = SessionPaths::new(root.path(), "daemons").work;
    for file in ["daemon.pid", "plain.pid"] {
        let pid = pid_in(&work, file);
        assert!(!alive(pid), "{file}: sleep 77 ({pid}) outlived its session");
    }
    assert_eq!(processes_in(&work), Vec::<i32>::new(), "processes left");
}

/// Issue 9: stop reaches what left the process group: a `setsid` child, and one that also
/// cleared its environment (found as a descendant of the running session).
#[tokio::test]
async fn stop_kills_setsid_children_too() {
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    rt.start(
        &sh(
            "stopsetsid",
            "setsid sh -c 'echo $$ > escaped.pid; exec sleep 77' & \
             setsid env -i /bin/sh -c 'echo $$ > bare.pid; exec /bin/sleep 77' & \
             sleep 100",
        ),
        root.path(),
    )
    .await
    .unwrap();
    let work = SessionPaths::new(root.path(), "stopsetsid").work;
    eventually("both pid files", || {
        ["escaped.pid", "bare.pid"]
            .iter()
            .all(|f| fs::metadata(work.join(f)).is_ok_and(|m| m.len() > 0))
    })
    .await;
    let pids = [pid_in(&work, "escaped.pid"), pid_in(&work, "bare.pid")];
    rt.stop("stopsetsid", Duration::from_secs(5)).await.unwrap();
    assert_eq!(rt.wait("stopsetsid").await.unwrap(), Exit::Signal(15));
    for pid in pids {
        assert!(!alive(pid), "{pid} outlived the stop of its session");
    }
    assert_eq!(processes_in(&work), Vec::<i32>::new(), "processes left");
}

/// A shell that builds a 200 MB string.
const HOG: &str = "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo ${#x}";

#[tokio::test]
async fn a_memory_limit_makes_a_hog_fail() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let process = ProcessRuntime::new(ProcessConfig::default());
    match process.cgroup_parent() {
        Some(parent) => eprintln!("memory limit through cgroup v2 under {}", parent.display()),
        None => eprintln!("no writable cgroup v2 here: memory limit through RLIMIT_AS"),
    }
    let rt = Runtime::Process(process);

    rt.start(&sh("free", HOG), root.path()).await.unwrap();
    assert_eq!(rt.wait("free").await.unwrap(), Exit::Code(0));
    assert_eq!(
        read(&SessionPaths::new(root.path(), "free").stdout),
        "200000000\n"
    );

    let mut limited = sh("limited", HOG);
    limited.limits = Limits {
        cpu_milli: 0,
        mem_bytes: 64 << 20,
    };
    rt.start(&limited, root.path()).await.unwrap();
    let exit = rt.wait("limited").await.unwrap();
    eprintln!("the hog under a 64 MiB limit: {exit}");
    assert!(!exit.success(), "the hog succeeded under the limit: {exit}");
    assert_ne!(
        read(&SessionPaths::new(root.path(), "limited").stdout),
        "200000000\n"
    );
}

#[tokio::test]
async fn outputs_are_collected_and_escapes_refused() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    let mut s = sh(
        "outs",
        "mkdir -p out/sub && echo a > out/a.txt && echo b > out/sub/b.txt \
         && echo r > result.txt && ln -s /etc/passwd out/link",
    );
    s.outputs = vec!["result.txt".into(), "out".into(), "missing.txt".into()];
    rt.start(&s, root.path()).await.unwrap();
    assert_eq!(rt.wait("outs").await.unwrap(), Exit::Code(0));

    let collected = rt.collect_outputs(&s, root.path()).await.unwrap();
    let outputs = SessionPaths::new(root.path(), "outs").outputs;
    assert_eq!(
        collected,
        vec![outputs.join("result.txt"), outputs.join("out")]
    );
    assert_eq!(read(&outputs.join("result.txt")), "r\n");
    assert_eq!(read(&outputs.join("out/a.txt")), "a\n");
    assert_eq!(read(&outputs.join("out/sub/b.txt")), "b\n");
    assert!(
        fs::symlink_metadata(outputs.join("out/link")).is_err(),
        "a link out of the work dir was copied"
    );

    for bad in ["../x", "/etc/passwd", "out/../../x"] {
        let mut escaping = s.clone();
        escaping.outputs = vec!["result.txt".into(), bad.into()];
        let err = rt
            .collect_outputs(&escaping, root.path())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, RuntimeError::OutputEscapes { path, .. } if path == bad),
            "{bad}: {err}"
        );
    }
    // Refused at start as well.
    let mut escaping = sh("escapes", "true");
    escaping.outputs = vec!["../x".into()];
    assert!(matches!(
        rt.start(&escaping, root.path()).await,
        Err(RuntimeError::OutputEscapes { .. })
    ));
}

#[tokio::test]
async fn running_finds_a_session_after_a_restart() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let first = runtime();
    first
        .start(&sh("longrun", "sleep 100"), root.path())
        .await
        .unwrap();
    first
        .start(&sh("short", "true"), root.path())
        .await
        .unwrap();
    assert_eq!(first.wait("short").await.unwrap(), Exit::Code(0));
    drop(first);

    // The agent restarts: a new runtime value knows nothing but what is on disk.
    let second = runtime();
    assert_eq!(second.running(root.path()).await.unwrap(), vec!["longrun"]);
    let work = SessionPaths::new(root.path(), "longrun").work;
    assert!(!processes_in(&work).is_empty());
    second
        .stop("longrun", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(matches!(
        second.wait("longrun").await.unwrap(),
        Exit::Failed(_)
    ));
    eventually("no process left", || processes_in(&work).is_empty()).await;
    assert!(second.running(root.path()).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_program_that_does_not_exist_fails_the_session() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    rt.start(&spec("nope", &["/no/such/program"]), root.path())
        .await
        .unwrap();
    match rt.wait("nope").await.unwrap() {
        Exit::Failed(why) => assert!(why.contains("/no/such/program"), "{why}"),
        other => panic!("expected a failure, got {other}"),
    }
}

#[tokio::test]
async fn misuse_is_refused() {
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let rt = runtime();
    assert!(matches!(
        rt.wait("unknown").await,
        Err(RuntimeError::UnknownSession(_))
    ));
    assert!(matches!(
        rt.start(&spec("../evil", &["true"]), root.path()).await,
        Err(RuntimeError::InvalidSpec { .. })
    ));
    assert!(matches!(
        rt.start(&spec("empty", &[]), root.path()).await,
        Err(RuntimeError::InvalidSpec { .. })
    ));
    rt.start(&sh("twice", "sleep 100"), root.path())
        .await
        .unwrap();
    assert!(matches!(
        rt.start(&sh("twice", "true"), root.path()).await,
        Err(RuntimeError::AlreadyRunning(_))
    ));
    assert!(matches!(
        rt.remove("twice").await,
        Err(RuntimeError::StillRunning(_))
    ));
    rt.stop("twice", Duration::from_secs(5)).await.unwrap();
    rt.remove("twice").await.unwrap();
    assert!(!PathBuf::from(root.path()).join("twice/pid.json").exists());
}

#[tokio::test]
async fn a_session_runs_in_its_own_cgroup_which_goes_at_the_end() {
    let Some(parent) = corral_testkit::cgroup2_parent() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    // Nothing it starts outlives the test, also when it fails.
    let _leftovers = KillLeftovers::new(root.path());
    let rt = Runtime::Process(ProcessRuntime::new(ProcessConfig {
        cgroup_parent: Some(parent.clone()),
        ..Default::default()
    }));
    // `setsid` takes a process out of the session's process group, but not out of its cgroup.
    rt.start(&sh("incgroup", "setsid sleep 100 & sleep 100"), root.path())
        .await
        .unwrap();
    let work = SessionPaths::new(root.path(), "incgroup").work;
    eventually("three processes", || processes_in(&work).len() == 3).await;
    let cgroup = parent.join("corral-incgroup");
    // What `cat /proc/PID/cgroup` shows for every process of the session, children included.
    for pid in processes_in(&work) {
        let text = read(Path::new(&format!("/proc/{pid}/cgroup")));
        let unified = text.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
        assert!(unified.ends_with("/corral-incgroup"), "{pid}: {text}");
    }
    let mut pids: Vec<i32> = read(&cgroup.join("cgroup.procs"))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    pids.sort();
    let mut expected = processes_in(&work);
    expected.sort();
    assert_eq!(pids, expected);

    rt.stop("incgroup", Duration::from_secs(5)).await.unwrap();
    assert_eq!(rt.wait("incgroup").await.unwrap(), Exit::Signal(15));
    assert_eq!(processes_in(&work), Vec::<i32>::new(), "processes left");
    assert!(!cgroup.exists(), "the session's cgroup was not removed");
}

/// Issue 9, with a cgroup: even a process that cleared its environment and escaped before any
/// look saw it (orphaned at once, in a session of its own) is in the session's cgroup, and
/// killed with it.
#[tokio::test]
async fn with_a_cgroup_even_a_process_without_the_cookie_is_killed() {
    let Some(parent) = corral_testkit::cgroup2_parent() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(root.path());
    let rt = Runtime::Process(ProcessRuntime::new(ProcessConfig {
        cgroup_parent: Some(parent.clone()),
        ..Default::default()
    }));
    rt.start(
        &sh(
            "bare",
            "( setsid env -i /bin/sh -c 'echo $$ > bare.pid; exec /bin/sleep 77' & ) ; \
             until [ -s bare.pid ]; do sleep 0.05; done",
        ),
        root.path(),
    )
    .await
    .unwrap();
    assert_eq!(rt.wait("bare").await.unwrap(), Exit::Code(0));
    let work = SessionPaths::new(root.path(), "bare").work;
    let bare = pid_in(&work, "bare.pid");
    assert!(!alive(bare), "{bare} outlived its session");
    assert_eq!(processes_in(&work), Vec::<i32>::new(), "processes left");
    assert!(!parent.join("corral-bare").exists());
}
