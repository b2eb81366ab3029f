//! deploy/Dockerfile, as an operator uses it: the image builds, the manager in it serves the API
//! on the published port, and its data outlives a restart of the container (the volume).
//! The base is the agent image `corral agent-image` builds (nothing can be pulled here); it holds
//! the same C library and a shell, as the Dockerfile asks of a base.
use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// `docker ARGS`, which must succeed; its stdout.
fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout).trim().to_string()
}

/// Removes the test's container, volume and images, whatever happens.
struct Leftovers {
    container: String,
    volume: String,
    images: Vec<String>,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let run = |args: &[&str]| {
            let _ = Command::new("docker").args(args).output();
        };
        run(&["rm", "-f", &self.container]);
        run(&["volume", "rm", "-f", &self.volume]);
        for image in &self.images {
            run(&["rmi", "-f", image]);
        }
    }
}

#[test]
fn the_manager_image_serves_the_api_and_keeps_its_data() {
    if !docker_and_busybox_available() {
        return;
    }
    let id = std::process::id();
    let base = format!("corral-base:deploy-{id}");
    let image = format!("corral-manager:deploy-{id}");
    let leftovers = Leftovers {
        container: format!("corral-manager-{id}"),
        volume: format!("corral-data-{id}"),
        images: vec![image.clone(), base.clone()],
    };
    // The binary without its debug information (close to a gigabyte in a test build).
    let context = tempfile::tempdir().unwrap();
    let binary = context.path().join("corral");
    let stripped = Command::new("objcopy")
        .args(["--strip-debug", CORRAL])
        .arg(&binary)
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        std::fs::copy(CORRAL, &binary).unwrap();
    }
    let out = Command::new(CORRAL)
        .args(["agent-image", "--tag", &base, "--binary"])
        .arg(&binary)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dockerfile = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/Dockerfile");
    docker(&[
        "build",
        "-q",
        "-f",
        dockerfile,
        "--build-arg",
        &format!("BASE={base}"),
        "-t",
        &image,
        context.path().to_str().unwrap(),
    ]);
    docker(&[
        "run",
        "-d",
        "--name",
        &leftovers.container,
        "-p",
        "127.0.0.1::8470",
        "-v",
        &format!("{}:/var/lib/corral", leftovers.volume),
        &image,
    ]);
    let address = || {
        let published = docker(&["port", &leftovers.container, "8470/tcp"]);
        format!("http://{}", published.lines().next().unwrap())
    };
    let healthy = |url: &str| {
        let host = url.trim_start_matches("http://").to_string();
        eventually(
            "the manager in the container is healthy",
            Duration::from_secs(60),
            || {
                use std::io::{Read, Write};
                let mut stream = std::net::TcpStream::connect(&host).ok()?;
                stream
                    .write_all(b"GET /api/v1/health HTTP/1.0\r\n\r\n")
                    .ok()?;
                let mut answer = String::new();
                stream.read_to_string(&mut answer).ok()?;
                (answer.split_whitespace().nth(1) == Some("200")).then_some(())
            },
        )
    };
    let url = address();
    healthy(&url);
    let token = docker(&[
        "exec",
        &leftovers.container,
        "cat",
        "/var/lib/corral/admin.token",
    ]);
    let corral = |url: &str, args: &[&str]| {
        let out = Command::new(CORRAL)
            .args(args)
            .args(["--server", url, "--token", &token])
            .env("CORRAL_CONFIG", "/nonexistent")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    corral(&url, &["group", "create", "kept"]);
    // Not root inside.
    assert_eq!(docker(&["exec", &leftovers.container, "id", "-u"]), "65532");
    // `docker stop` sends SIGTERM, and kills after 10 s: the manager ends on its own, cleanly.
    docker(&["stop", &leftovers.container]);
    let exit = docker(&[
        "inspect",
        "--format",
        "{{.State.ExitCode}}",
        &leftovers.container,
    ]);
    assert_eq!(exit, "0");
    docker(&["start", &leftovers.container]);
    let url = address();
    healthy(&url);
    let groups = corral(&url, &["group", "ls", "-o", "json"]);
    assert!(groups.contains("\"kept\""), "{groups}");
}
