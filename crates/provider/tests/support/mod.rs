//! What the tests of the local providers share: a group's context, a shell script standing in
//! for `corral`, and looks at processes.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_core::InstanceTemplate;
use corral_provider::{Context, LaunchRequest};

pub const MANAGER: &str = "http://127.0.0.1:8470";

/// Stands in for `corral`: prints how it was started (one `arg=` line per argument, its token
/// and its pid), starts a child, and waits like an agent. On SIGTERM it says so
/// (`stopped=TERM`) and exits. With the argument `--stubborn` it says so (`ignored=TERM`) and
/// goes on, and its child and session ignore SIGTERM: only SIGKILL ends them. With
/// `--with-session` it also starts a process in a group of its own, as the agent's process
/// runtime runs sessions (`session=` line).
pub const STAND_IN_AGENT: &str = r#"#!/bin/sh
for arg in "$@"; do printf 'arg=%s\n' "$arg"; done
printf 'token=%s\n' "${CORRAL_TOKEN-}"
printf 'pid=%s\n' "$$"
ignore=
case " $* " in *" --stubborn "*) ignore="trap '' TERM;" ;; esac
if [ -n "$ignore" ]; then
  trap 'printf "ignored=TERM\n"' TERM
else
  trap 'printf "stopped=TERM\n"; exit 0' TERM
fi
case " $* " in *" --with-session "*)
  (eval "$ignore"; exec python3 -c 'import os, time; os.setpgid(0, 0); time.sleep(600)') &
  printf 'session=%s\n' "$!" ;;
esac
(eval "$ignore"; exec sleep 600) &
child=$!
printf 'child=%s\n' "$child"
# A trapped signal ends `wait`: wait again while the child lives.
while kill -0 "$child" 2>/dev/null; do wait "$child"; done
"#;

/// A group `group` with templates `small` (cpu=1,mem=1GiB) and `large` (cpu=4,mem=8GiB).
pub fn context(group: &str, state_dir: &Path, corral_binary: &Path) -> Context {
    let template = |name: &str, slots: &str, price: f64| InstanceTemplate {
        name: name.into(),
        slots: slots.parse().unwrap(),
        price_per_hour: price,
        max: 0,
        labels: BTreeMap::from([("zone".to_string(), "local".to_string())]),
        devices: Vec::new(),
    };
    Context {
        group: group.into(),
        manager_url: MANAGER.into(),
        templates: vec![
            template("small", "cpu=1,mem=1GiB", 0.25),
            template("large", "cpu=4,mem=8GiB", 1.0),
        ],
        corral_binary: corral_binary.into(),
        state_dir: state_dir.into(),
    }
}

/// Writes an executable script.
pub fn script(path: &Path, text: &str) -> PathBuf {
    corral_testkit::write_executable(path, text);
    path.to_path_buf()
}

pub fn requests(ids: &[&str]) -> Vec<LaunchRequest> {
    ids.iter()
        .map(|id| LaunchRequest {
            agent_id: id.to_string(),
            token: format!("token-of-{id}"),
        })
        .collect()
}

/// The values of the `key=` lines a stand-in agent printed into `log`.
pub fn log_values(log: &Path, key: &str) -> Vec<String> {
    let prefix = format!("{key}=");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .collect()
}

/// Waits until a stand-in agent has printed everything (its child's pid comes last) and returns
/// (its pid, its child's pid).
pub async fn stand_in_pids(log: &Path) -> (i32, i32) {
    let what = format!("the stand-in agent's child= line in {}", log.display());
    corral_testkit::eventually_async(&what, Duration::from_secs(10), || {
        std::future::ready(!log_values(log, "child").is_empty())
    })
    .await;
    let pid = log_values(log, "pid")[0].parse().unwrap();
    let child = log_values(log, "child")[0].parse().unwrap();
    (pid, child)
}

/// The process exists and is not a zombie.
pub fn is_live(pid: i32) -> bool {
    corral_runtime::procfs::stat(pid).is_some_and(|s| s.alive())
}

/// The process ended and was reaped by its parent (no zombie left).
pub fn is_reaped(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// Its command line, NUL-separated arguments joined by spaces.
pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

pub fn kill(pid: i32, signal: i32) {
    // SAFETY: kill(2) with plain integers.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill {pid}");
}
