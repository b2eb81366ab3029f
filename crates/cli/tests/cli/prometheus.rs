//! A real Prometheus (Debian's package) scrapes a running `corral server` with a token, and a
//! query of the metrics (docs/metrics.md) answers what was submitted.
use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

#[test]
fn prometheus_scrapes_the_manager_and_counts_pending_sessions() {
    let available = Command::new("prometheus")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !corral_testkit::require("Prometheus (apt-get install prometheus)", available) {
        return;
    }
    let c = Cluster::start(60);
    // A group whose sessions wait: its one agent is drained, so nothing new lands on it.
    ok(c.cli(&["group", "create", "wait"]));
    ok(c.cli(&[
        "agent",
        "register",
        "idle-1",
        "--group",
        "wait",
        "--capacity",
        "cpu=2",
    ]));
    ok(c.cli(&["agent", "drain", "idle-1"]));
    for _ in 0..3 {
        c.submit(&["--group", "wait", "--request", "cpu=1", "--", "true"]);
    }

    let dir = c.dir.path().join("prometheus");
    std::fs::create_dir(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, &c.token).unwrap();
    let config = format!(
        "global: {{scrape_interval: 1s}}\n\
         scrape_configs:\n\
         \x20 - job_name: corral\n\
         \x20   authorization: {{credentials_file: {}}}\n\
         \x20   static_configs: [{{targets: [\"127.0.0.1:{}\"]}}]\n",
        token_file.display(),
        c.port
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let _prometheus = Proc(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let query = r#"sum(corral_sessions{group="wait",state="pending"})"#;
    let answer = eventually(
        "Prometheus to have scraped the 3 pending sessions",
        Duration::from_secs(60),
        || {
            let out = Command::new("promtool")
                .args([
                    "query",
                    "instant",
                    &format!("http://127.0.0.1:{port}"),
                    query,
                ])
                .output()
                .ok()?;
            let text = text(&out.stdout);
            // `{} => 3 @[1796...]`
            (text.split_whitespace().nth(2) == Some("3")).then_some(text)
        },
    );
    assert!(answer.contains("=> 3"), "{answer}");
    // The scrape itself is healthy: `up` is 1 for the target.
    let out = Command::new("promtool")
        .args([
            "query",
            "instant",
            &format!("http://127.0.0.1:{port}"),
            "up",
        ])
        .output()
        .unwrap();
    assert!(text(&out.stdout).contains("=> 1"), "{}", text(&out.stdout));
}
