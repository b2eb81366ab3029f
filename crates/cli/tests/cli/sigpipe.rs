//! Issue 9: the daemons ignore SIGPIPE. A manager whose log reader went away (`corral server
//! 2>&1 | head -c 200`) or whose exec plugin exits without reading its request goes on serving;
//! before, it died of SIGPIPE (exit by signal 13) at the next log line or plugin call.
use crate::common;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStderr, Command, Stdio};

use serde_json::{json, Value};

use common::*;

/// `corral server` on a free port, its standard error piped to the test.
fn server(dir: &std::path::Path) -> (Proc, u16, ChildStderr) {
    let data = dir.join("data");
    let (mut server, port) = start_manager(&data, &[], || {
        let mut command = Command::new(CORRAL);
        command
            .args(["server", "--data-dir"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    });
    let stderr = server.0.stderr.take().unwrap();
    (server, port, stderr)
}

/// Runs `corral ARGS` against the manager on `port` as its admin.
fn cli(dir: &std::path::Path, port: u16, args: &[&str]) -> std::process::Output {
    let token = std::fs::read_to_string(dir.join("data/admin.token")).unwrap();
    Command::new(CORRAL)
        .args(args)
        .env("CORRAL_SERVER", format!("http://127.0.0.1:{port}"))
        .env("CORRAL_TOKEN", token.trim())
        .env("CORRAL_CONFIG", dir.join("none.toml"))
        .output()
        .unwrap()
}

/// `GET /api/v1/health` answers 200.
fn healthy(port: u16) -> bool {
    use std::io::Write;
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let request = "GET /api/v1/health HTTP/1.1\r\nHost: corral\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// Fails the test, saying how, if the server exited.
fn assert_running(server: &mut Proc) {
    if let Some(status) = server.0.try_wait().unwrap() {
        panic!("the server exited ({status}, signal {:?})", status.signal());
    }
}

/// Waits (30 s at most) for `check` to give a value; fails early if the server exits.
fn until<T>(server: &mut Proc, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    eventually(what, std::time::Duration::from_secs(30), || {
        assert_running(server);
        check()
    })
}

fn group_file(dir: &std::path::Path, group: Value) -> String {
    let file = dir.join("group.json");
    std::fs::write(&file, group.to_string()).unwrap();
    file.to_str().unwrap().to_string()
}

/// The group's instances, failed ones included.
fn instances(dir: &std::path::Path, port: u16, group: &str) -> Vec<Value> {
    let out = cli(
        dir,
        port,
        &["group", "instances", group, "--all", "-o", "json"],
    );
    serde_json::from_slice::<Value>(&out.stdout).unwrap_or_default()["instances"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn the_server_goes_on_serving_when_its_log_reader_goes_away() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, port, mut stderr) = server(dir.path());
    // Read the first log lines, then hang up, as `corral server 2>&1 | head -c 200` does.
    let mut first = [0u8; 200];
    let n = stderr.read(&mut first).unwrap();
    assert!(n > 0, "the server logged nothing");
    drop(stderr);

    // What makes it log: a group whose min_nodes the static provider cannot launch (a warning,
    // and again at each retry) and a session submitted to it.
    let group = json!({
        "name": "g",
        "policy": {"kind": "demand", "min_nodes": 1, "max_nodes": 1},
        "templates": [{"name": "small", "slots": "cpu=1,mem=1GiB", "max": 1}],
        "provider": {"name": "static",
                     "launch": {"backoff_initial_secs": 1, "backoff_max_secs": 1}},
    });
    let file = group_file(dir.path(), group);
    let out = cli(dir.path(), port, &["group", "create", "g", "--file", &file]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    until(&mut server, "a launch that failed, logged", || {
        instances(dir.path(), port, "g")
            .iter()
            .any(|i| i["phase"] == "failed")
            .then_some(())
    });
    let out = cli(
        dir.path(),
        port,
        &[
            "session",
            "submit",
            "--group",
            "g",
            "--request",
            "cpu=1",
            "--",
            "true",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_running(&mut server);
    assert!(healthy(port), "the server stopped answering");
}

#[test]
fn a_plugin_that_does_not_read_its_request_does_not_kill_the_server() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("plugin");
    std::fs::write(&plugin, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (mut server, port, stderr) = server(dir.path());
    // The log is drained, so that only the plugin can raise SIGPIPE.
    std::thread::spawn(move || std::io::copy(&mut { stderr }, &mut std::io::sink()));

    // Every request carries the templates: padded, they make it larger than a pipe holds, so
    // writing it to a plugin that exits without reading fails with EPIPE, not by chance.
    let templates: Vec<Value> = (0..200)
        .map(|i| {
            json!({"name": format!("t{i}"), "slots": "cpu=1,mem=1GiB", "max": 1,
                   "labels": {"pad": "x".repeat(500)}})
        })
        .collect();
    let group = json!({
        "name": "p",
        "policy": {"kind": "demand", "min_nodes": 1, "max_nodes": 1},
        "templates": templates,
        "provider": {"name": "exec", "options": {"command": plugin, "timeout_secs": 10},
                     "launch": {"backoff_initial_secs": 1, "backoff_max_secs": 1}},
    });
    let file = group_file(dir.path(), group);
    let out = cli(dir.path(), port, &["group", "create", "p", "--file", &file]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The launch fails as the provider's transient error, saying why.
    let failed = until(&mut server, "a failed launch", || {
        instances(dir.path(), port, "p")
            .into_iter()
            .find(|i| i["phase"] == "failed")
    });
    let reason = failed["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("closed its standard input"), "{failed}");
    assert_running(&mut server);
    assert!(healthy(port), "the server stopped answering");
}
