//! The Docker runtime against the real Docker daemon, with a busybox image built here (no image
//! can be pulled). Each test skips, saying so, if no daemon answers or busybox is missing (and
//! fails instead under `CI=true`). Each agent name is the test's own, so that the containers a
//! test leaves are removed by agent when it ends, without touching another test's.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bollard::models::DeviceRequest;
use corral_core::{DeviceGrant, Quantity, SlotName};
use corral_runtime::testing::create_session_container;
use corral_runtime::{
    DockerRuntime, ExecRequest, Exit, Limits, Runtime, RuntimeError, SessionPaths, SessionSpec,
    LABEL_AGENT,
};
use corral_testkit::RemoveContainers;

const IMAGE: &str = corral_runtime::testing::TEST_IMAGE;

/// A runtime of the agent `agent` on the local daemon with the test image present, and a guard
/// that removes the agent's containers when the test ends, also when it fails. `None` where
/// that cannot be had: the test is skipped, saying why (and fails instead under `CI=true`).
async fn docker(agent: &str) -> Option<(DockerRuntime, RemoveContainers)> {
    let rt = corral_testkit::require_ok(
        "Docker with the test image",
        corral_runtime::testing::docker_with_test_image(agent).await,
    )?;
    Some((
        rt,
        RemoveContainers::new(format!("label={LABEL_AGENT}={agent}")),
    ))
}

/// A session id no earlier run left a container for.
fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}{}x{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn sh(id: &str, script: &str) -> SessionSpec {
    SessionSpec {
        id: id.to_string(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        image: Some(IMAGE.to_string()),
        ..Default::default()
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn exit_code_logs_and_limits() {
    let agent = unique("agent");
    let Some((docker, _containers)) = docker(&agent).await else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let id = unique("exit");
    let mut spec = sh(&id, "echo hi; echo err >&2; exit 3");
    spec.limits = Limits {
        cpu_milli: 500,
        mem_bytes: 256 << 20,
    };
    let client = docker.client().clone();
    let rt = Runtime::Docker(docker);
    rt.start(&spec, root.path()).await.unwrap();
    assert_eq!(rt.wait(&id).await.unwrap(), Exit::Code(3));
    let paths = SessionPaths::new(root.path(), &id);
    assert_eq!(read(&paths.stdout), "hi\n");
    assert_eq!(read(&paths.stderr), "err\n");

    // What `docker inspect` shows.
    let info = client
        .inspect_container(&DockerRuntime::container_name(&id), None)
        .await
        .unwrap();
    let host = info.host_config.unwrap();
    assert_eq!(host.nano_cpus, Some(500_000_000));
    assert_eq!(host.memory, Some(256 << 20));
    let labels = info.config.unwrap().labels.unwrap();
    assert_eq!(labels["corral.session"], id);
    assert_eq!(labels["corral.agent"], agent);

    rt.remove(&id).await.unwrap();
    assert!(client
        .inspect_container(&DockerRuntime::container_name(&id), None)
        .await
        .is_err());
}

#[tokio::test]
async fn environment_work_dir_and_default_command() {
    let agent = unique("agent");
    let Some((docker, _containers)) = docker(&agent).await else {
        return;
    };
    let rt = Runtime::Docker(docker);
    let root = tempfile::tempdir().unwrap();

    let id = unique("env");
    let paths = SessionPaths::new(root.path(), &id);
    fs::create_dir_all(&paths.work).unwrap();
    fs::write(paths.work.join("input.txt"), "staged\n").unwrap();
    let mut spec = sh(&id, "cat input.txt; pwd; env");
    spec.environment
        .insert("GREETING".into(), "hello world".into());
    rt.start(&spec, root.path()).await.unwrap();
    assert_eq!(rt.wait(&id).await.unwrap(), Exit::Code(0));
    let out = read(&paths.stdout);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("staged"));
    assert_eq!(lines.next(), Some("/work"));
    let env: Vec<&str> = lines.collect();
    assert!(env.contains(&"GREETING=hello world"), "{env:?}");
    assert!(
        !env.iter().any(|l| l.starts_with("CARGO")),
        "the agent's environment leaked in: {env:?}"
    );
    rt.remove(&id).await.unwrap();

    let id = unique("default");
    let mut spec = sh(&id, "");
    spec.command.clear();
    rt.start(&spec, root.path()).await.unwrap();
    assert_eq!(rt.wait(&id).await.unwrap(), Exit::Code(0));
    assert_eq!(
        read(&SessionPaths::new(root.path(), &id).stdout),
        "default command\n"
    );
    rt.remove(&id).await.unwrap();
}

#[tokio::test]
async fn stop_ends_the_container() {
    let agent = unique("agent");
    let Some((docker, _containers)) = docker(&agent).await else {
        return;
    };
    let client = docker.client().clone();
    let rt = Runtime::Docker(docker);
    let root = tempfile::tempdir().unwrap();
    let id = unique("stop");
    rt.start(&sh(&id, "sleep 100 & sleep 100"), root.path())
        .await
        .unwrap();
    assert!(rt.running(root.path()).await.unwrap().contains(&id));
    // The shell is the container's first process, which ignores SIGTERM: killed after the grace.
    rt.stop(&id, Duration::from_millis(500)).await.unwrap();
    assert_eq!(rt.wait(&id).await.unwrap(), Exit::Signal(9));
    let state = client
        .inspect_container(&DockerRuntime::container_name(&id), None)
        .await
        .unwrap()
        .state
        .unwrap();
    assert_eq!(state.running, Some(false));
    assert!(!rt.running(root.path()).await.unwrap().contains(&id));
    rt.remove(&id).await.unwrap();

    // A program that ends on SIGTERM ends within the grace.
    let id = unique("term");
    rt.start(
        &sh(&id, "trap 'exit 42' TERM; echo trapped; sleep 100 & wait"),
        root.path(),
    )
    .await
    .unwrap();
    // Stopped once its trap is set (before, SIGTERM would find the shell without it).
    let stdout = SessionPaths::new(root.path(), &id).stdout;
    corral_testkit::eventually_async("the trap to be set", Duration::from_secs(20), || {
        std::future::ready(fs::read_to_string(&stdout).is_ok_and(|out| out == "trapped\n"))
    })
    .await;
    rt.stop(&id, Duration::from_secs(20)).await.unwrap();
    assert_eq!(rt.wait(&id).await.unwrap(), Exit::Code(42));
    rt.remove(&id).await.unwrap();
}

#[tokio::test]
async fn a_memory_limit_makes_a_hog_fail() {
    let agent = unique("agent");
    let Some((docker, _containers)) = docker(&agent).await else {
        return;
    };
    let rt = Runtime::Docker(docker);
    let root = tempfile::tempdir().unwrap();
    let hog = "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo ${#x}";

    let free = unique("free");
    rt.start(&sh(&free, hog), root.path()).await.unwrap();
    assert_eq!(rt.wait(&free).await.unwrap(), Exit::Code(0));
    assert_eq!(
        read(&SessionPaths::new(root.path(), &free).stdout),
        "200000000\n"
    );
    rt.remove(&free).await.unwrap();

    let limited = unique("limited");
    let mut spec = sh(&limited, hog);
    spec.limits.mem_bytes = 64 << 20;
    rt.start(&spec, root.path()).await.unwrap();
    let exit = rt.wait(&limited).await.unwrap();
    eprintln!("the hog under a 64 MiB limit: {exit}");
    assert!(!exit.success(), "the hog succeeded under the limit: {exit}");
    rt.remove(&limited).await.unwrap();
}

#[tokio::test]
async fn outputs_are_copied_out_and_escapes_refused() {
    let agent = unique("agent");
    let Some((docker, _containers)) = docker(&agent).await else {
        return;
    };
    let rt = Runtime::Docker(docker);
    let root = tempfile::tempdir().unwrap();
    let id = unique("outs");
    let mut spec = sh(
        &id,
        "mkdir -p out/sub && echo a > out/a.txt && echo b > out/sub/b.txt \
         && echo r > result.txt && ln -s /etc/passwd out/link",
    );
    spec.outputs = vec!["result.txt".into(), "out".into(), "missing.txt".into()];
    rt.start(&spec, root.path()).await.unwrap();
    assert_eq!(rt.wait(&id).await.unwrap(), Exit::Code(0));
    let collected = rt.collect_outputs(&spec, root.path()).await.unwrap();
    let outputs = SessionPaths::new(root.path(), &id).outputs;
    assert_eq!(
        collected,
        vec![outputs.join("result.txt"), outputs.join("out")]
    );
    assert_eq!(read(&outputs.join("result.txt")), "r\n");
    assert_eq!(read(&outputs.join("out/a.txt")), "a\n");
    assert_eq!(read(&outputs.join("out/sub/b.txt")), "b\n");
    assert!(fs::symlink_metadata(outputs.join("out/link")).is_err());

    let mut escaping = spec.clone();
    escaping.outputs = vec!["result.txt".into(), "../x".into()];
    let err = rt
        .collect_outputs(&escaping, root.path())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::OutputEscapes { path, .. } if path == "../x"),
        "{err}"
    );
    rt.remove(&id).await.unwrap();
}

#[tokio::test]
async fn running_finds_a_container_after_a_restart() {
    let (agent, other_agent) = (unique("agent-restart"), unique("agent-other"));
    let Some((first, _containers)) = docker(&agent).await else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let id = unique("long");
    first
        .start(&sh(&id, "echo before; sleep 100"), root.path())
        .await
        .unwrap();
    drop(first);

    // (Its containers are removed by the first guard.)
    let reconnect = |agent| corral_runtime::testing::docker_with_test_image(agent);
    let second = Runtime::Docker(reconnect(&agent).await.unwrap());
    assert!(second.running(root.path()).await.unwrap().contains(&id));
    // Another agent's containers are not this one's.
    let other = Runtime::Docker(reconnect(&other_agent).await.unwrap());
    assert!(!other.running(root.path()).await.unwrap().contains(&id));

    second.stop(&id, Duration::from_millis(200)).await.unwrap();
    assert_eq!(second.wait(&id).await.unwrap(), Exit::Signal(9));
    assert_eq!(
        read(&SessionPaths::new(root.path(), &id).stdout),
        "before\n"
    );
    second.remove(&id).await.unwrap();
}

#[tokio::test]
async fn a_missing_image_or_program_fails_the_session() {
    let agent = unique("agent");
    let Some((docker, _containers)) = docker(&agent).await else {
        return;
    };
    let rt = Runtime::Docker(docker);
    let root = tempfile::tempdir().unwrap();

    let id = unique("noimage");
    let mut spec = sh(&id, "true");
    spec.image = Some("corral-test-no-such-image:1".into());
    rt.start(&spec, root.path()).await.unwrap();
    assert!(matches!(rt.wait(&id).await.unwrap(), Exit::Failed(_)));
    rt.remove(&id).await.unwrap();

    let id = unique("noprog");
    let mut spec = sh(&id, "");
    spec.command = vec!["/no/such/program".into()];
    rt.start(&spec, root.path()).await.unwrap();
    match rt.wait(&id).await.unwrap() {
        Exit::Failed(why) => assert!(why.contains("/no/such/program"), "{why}"),
        other => panic!("expected a failure, got {other}"),
    }
    rt.remove(&id).await.unwrap();

    let mut spec = sh(&unique("noimg"), "true");
    spec.image = None;
    assert!(matches!(
        rt.start(&spec, root.path()).await,
        Err(RuntimeError::InvalidSpec { .. })
    ));
}

fn gpu(id: &str, share_milli: u64) -> DeviceGrant {
    DeviceGrant {
        id: id.into(),
        kind: SlotName::new("gpu").unwrap(),
        share: Quantity::from_milli(share_milli),
        memory: Quantity::ZERO,
    }
}

/// What the daemon recorded of a container: its device requests and environment.
async fn requested(
    docker: &DockerRuntime,
    name: &str,
) -> (Option<Vec<DeviceRequest>>, Vec<String>) {
    let info = docker.client().inspect_container(name, None).await.unwrap();
    let devices = info.host_config.unwrap().device_requests;
    (devices, info.config.unwrap().env.unwrap_or_default())
}

/// The GPUs granted to a session are what its container asks of the daemon. This daemon has no
/// NVIDIA runtime, so such a container cannot start: it is created only, and inspected.
#[tokio::test]
async fn granted_gpus_are_asked_of_the_daemon() {
    let agent = unique("agent");
    let Some((docker, _containers)) = docker(&agent).await else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    // No CDI specification here: the `nvidia` driver.
    let no_cdi = tempfile::tempdir().unwrap();
    let docker = docker.with_cdi_dirs(vec![no_cdi.path().to_path_buf()]);
    let (a, b) = (
        "GPU-7c3f9a1e-2d4b-4f86-b5e0-8a6c1d9e3f27",
        "MIG-c7384736-a75d-5afc-978f-d2f1294409fd",
    );
    let id = unique("gpus");
    let mut spec = sh(&id, "true");
    spec.devices = vec![gpu(a, 1000), gpu(b, 500)];
    spec.environment
        .insert("NVIDIA_VISIBLE_DEVICES".into(), "all".into());
    let name = create_session_container(&docker, &spec, root.path())
        .await
        .unwrap();
    let (devices, env) = requested(&docker, &name).await;
    let devices = devices.expect("no device requests");
    assert_eq!(devices.len(), 1, "{devices:?}");
    assert_eq!(devices[0].driver.as_deref(), Some("nvidia"));
    assert_eq!(
        devices[0].device_ids,
        Some(vec![a.to_string(), b.to_string()])
    );
    assert_eq!(devices[0].capabilities, Some(vec![vec!["gpu".to_string()]]));
    // The grant, not what the session said, is in its variables.
    let ids = format!("{a},{b}");
    for expected in [
        format!("CUDA_VISIBLE_DEVICES={ids}"),
        format!("NVIDIA_VISIBLE_DEVICES={ids}"),
        format!("CORRAL_GPU_SHARES={a}=1,{b}=0.5"),
    ] {
        assert!(env.contains(&expected), "{expected} not in {env:?}");
    }
    assert!(
        !env.contains(&"NVIDIA_VISIBLE_DEVICES=all".to_string()),
        "{env:?}"
    );
    docker.remove(&id).await.unwrap();

    // Started, it fails, naming the device, where the daemon cannot give these GPUs: here no
    // daemon can (no NVIDIA runtime, or no such device).
    let id = unique("gpustart");
    let mut spec = sh(&id, "true");
    spec.devices = vec![gpu(a, 1000)];
    docker.start(&spec, root.path()).await.unwrap();
    match docker.wait(&id).await.unwrap() {
        Exit::Failed(why) => assert!(why.contains("device"), "{why}"),
        other => panic!("a session with a GPU that is not there ran: {other}"),
    }
    docker.remove(&id).await.unwrap();

    // With a CDI specification of NVIDIA GPUs on the host: the `cdi` driver, CDI names.
    let cdi = tempfile::tempdir().unwrap();
    fs::write(
        cdi.path().join("nvidia.yaml"),
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n",
    )
    .unwrap();
    let docker = docker.with_cdi_dirs(vec![no_cdi.path().to_path_buf(), cdi.path().to_path_buf()]);
    let id = unique("cdi");
    let mut spec = sh(&id, "true");
    spec.devices = vec![gpu(b, 250)];
    let name = create_session_container(&docker, &spec, root.path())
        .await
        .unwrap();
    let (devices, _) = requested(&docker, &name).await;
    let devices = devices.expect("no device requests");
    assert_eq!(devices.len(), 1, "{devices:?}");
    assert_eq!(devices[0].driver.as_deref(), Some("cdi"));
    assert_eq!(
        devices[0].device_ids,
        Some(vec![format!("nvidia.com/gpu={b}")])
    );
    docker.remove(&id).await.unwrap();

    // No grant: no device request, and no GPU in its variables.
    let id = unique("nogpu");
    let mut spec = sh(&id, "true");
    spec.environment
        .insert("NVIDIA_VISIBLE_DEVICES".into(), "all".into());
    let name = create_session_container(&docker, &spec, root.path())
        .await
        .unwrap();
    let (devices, env) = requested(&docker, &name).await;
    assert!(devices.unwrap_or_default().is_empty());
    for expected in [
        "CUDA_VISIBLE_DEVICES=",
        "NVIDIA_VISIBLE_DEVICES=",
        "CORRAL_GPU_SHARES=",
    ] {
        assert!(
            env.contains(&expected.to_string()),
            "{expected} not in {env:?}"
        );
    }
    docker.remove(&id).await.unwrap();
}

/// Everything a stream of a command run in a session gives until its end.
async fn to_end(stream: &mut std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>) -> String {
    use tokio::io::AsyncReadExt;
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_string(&mut text))
        .await
        .expect("the stream did not end")
        .unwrap();
    text
}

fn exec_request(command: &[&str], tty: bool) -> ExecRequest {
    ExecRequest {
        command: command.iter().map(|s| s.to_string()).collect(),
        tty,
        ..Default::default()
    }
}

/// Issue 46: a command run in a container session, on pipes and on a terminal.
#[tokio::test]
async fn a_command_runs_in_a_running_container() {
    use tokio::io::AsyncWriteExt;
    let agent = unique("agent");
    let Some((docker, _containers)) = docker(&agent).await else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let id = unique("exec");
    let mut spec = sh(&id, "exec sleep 600");
    spec.environment.insert("GREETING".into(), "hello".into());
    let rt = Runtime::Docker(docker);
    let err = rt
        .exec(&spec, root.path(), &exec_request(&["true"], false))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::NotRunning(_)), "{err}");
    rt.start(&spec, root.path()).await.unwrap();

    // On pipes: its input, two outputs, the container's environment and working directory.
    let script = "read x; echo got $x $GREETING; pwd; echo err >&2; exit 3";
    let request = exec_request(&["sh", "-c", script], false);
    let mut exec = rt.exec(&spec, root.path(), &request).await.unwrap();
    exec.stdin.write_all(b"hi\n").await.unwrap();
    let mut stderr = exec.stderr.take().expect("a stderr without a terminal");
    let (out, err) = tokio::join!(to_end(&mut exec.stdout), to_end(&mut stderr));
    assert_eq!(out, "got hi hello\n/work\n");
    assert_eq!(err, "err\n");
    assert_eq!(exec.exit.await, Exit::Code(3));

    // Dropping stdin ends its input.
    let mut exec = rt
        .exec(&spec, root.path(), &exec_request(&["cat"], false))
        .await
        .unwrap();
    exec.stdin.write_all(b"one\n").await.unwrap();
    drop(exec.stdin);
    assert_eq!(to_end(&mut exec.stdout).await, "one\n");
    assert_eq!(exec.exit.await, Exit::Code(0));

    // On a terminal of the size asked, then resized.
    let script = "read x; stty size; tty; read y; stty size; exit 5";
    let request = ExecRequest {
        cols: 80,
        rows: 24,
        ..exec_request(&["sh", "-c", script], true)
    };
    let mut exec = rt.exec(&spec, root.path(), &request).await.unwrap();
    assert!(exec.stderr.is_none());
    exec.stdin.write_all(b"a\n").await.unwrap();
    let mut seen = String::new();
    while !seen.contains("/dev/pts/") {
        let mut chunk = [0u8; 256];
        let n = tokio::io::AsyncReadExt::read(&mut exec.stdout, &mut chunk)
            .await
            .unwrap();
        assert!(n > 0, "the terminal ended early: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
    exec.resizer.resize(132, 50).await.unwrap();
    exec.stdin.write_all(b"b\n").await.unwrap();
    let out = seen + &to_end(&mut exec.stdout).await;
    let lines: Vec<&str> = out.split("\r\n").collect();
    assert_eq!(lines[..2], ["a", "24 80"], "{out:?}");
    assert!(lines[2].starts_with("/dev/pts/"), "{out:?}");
    assert_eq!(lines[3..], ["b", "50 132", ""], "{out:?}");
    assert_eq!(exec.exit.await, Exit::Code(5));

    // Its `sleep` is process 1, which ignores SIGTERM: no need to wait long.
    rt.stop(&id, Duration::from_millis(100)).await.unwrap();
    let err = rt
        .exec(&spec, root.path(), &exec_request(&["true"], false))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::NotRunning(_)), "{err}");
}
