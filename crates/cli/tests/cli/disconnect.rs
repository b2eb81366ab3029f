//! An agent cut off from its manager (issue 17, item 4), through a TCP front that stands in for
//! the network path and partitions it (`corral_testkit::Front::cut`): with the group's
//! `on_disconnect: stop` the agent stops its session itself once silent for `lost_after`, and the
//! manager requeues it only after that stop is over, so its two runs never overlap; with `keep`
//! the session runs on and stays the agent's until it is back.
//!
//! Each session appends the time (ns) to a file of its run every 50 ms: the runs' files are
//! what a user would look at to see whether it ran twice at once.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use corral_testkit::{Front, Netns};

/// Ticks for `secs` seconds into `<marks>/<pid>`, one line a tick (nanoseconds since the epoch).
fn ticking(marks: &Path, secs: u32) -> String {
    format!(
        "f={}/$$; i=0; while [ $i -lt {} ]; do date +%s%N >> $f; sleep 0.05; i=$((i+1)); done",
        marks.display(),
        secs * 20
    )
}

/// Each run's ticks, in order of its first.
fn runs(marks: &Path) -> Vec<Vec<u128>> {
    let mut runs: Vec<Vec<u128>> = std::fs::read_dir(marks)
        .unwrap()
        .map(|e| {
            std::fs::read_to_string(e.unwrap().path())
                .unwrap()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect::<Vec<u128>>()
        })
        .filter(|ticks| !ticks.is_empty())
        .collect();
    runs.sort_by_key(|ticks| ticks[0]);
    runs
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// An agent of `group` that reaches the manager through `front` only.
fn agent_through(c: &Cluster, front: &Front, id: &str, group: &str) -> Proc {
    let mut command = c.agent_command(id, group, "cpu=1");
    command.env("CORRAL_SERVER", front.url());
    c.agent_from(id, command)
}

/// A session of `secs` seconds of ticks submitted to `group`, once it ticks on `agent`.
fn ticking_on(c: &Cluster, marks: &Path, group: &str, agent: &str, secs: u32) -> String {
    let id = c.submit(&[
        "--group",
        group,
        "--request",
        "cpu=1",
        "--",
        "sh",
        "-c",
        &ticking(marks, secs),
    ]);
    c.until(&format!("the session ticks on {agent}"), || {
        let s = c.listed(&id);
        (s["agent"] == agent && runs(marks).first().is_some_and(|r| r.len() >= 3)).then_some(())
    });
    id
}

/// a1 is alive again, and the session ends on a2.
fn back_and_done_elsewhere(c: &Cluster, id: &str) {
    c.until("a1 is back", || {
        let agents = c.json(&["agent", "ls", "-o", "json"]);
        agents
            .as_array()?
            .iter()
            .any(|a| a["id"] == "a1" && a["state"] == "alive")
            .then_some(())
    });
    c.until_for(30, "the session succeeds on a2", || {
        let s = c.listed(id);
        (s["state"] == "succeeded" && s["agent"] == "a2").then_some(())
    });
}

fn manager_addr(c: &Cluster) -> std::net::SocketAddr {
    format!("127.0.0.1:{}", c.port).parse().unwrap()
}

fn marks_dir(c: &Cluster) -> PathBuf {
    let marks = c.dir.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    marks
}

/// The messages of the agent's events of `kind`.
fn events_of(c: &Cluster, agent: &str, kind: &str) -> Vec<String> {
    c.json(&["events", "--agent", agent, "-o", "json"])
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter(|e| e["kind"] == kind)
                .map(|e| e["message"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_cut_off_agent_stops_its_session_before_it_runs_again_elsewhere() {
    let c = Cluster::start(3);
    let front = Front::start(vec![manager_addr(&c)]).unwrap();
    let mut a1 = c.agent_command("a1", "g", "cpu=1");
    a1.env("CORRAL_SERVER", front.url());
    cut_off_and_back(&c, a1, || front.cut(), || front.mend());
}

/// The same through a real partition: the agent in a network namespace whose link goes down.
#[test]
fn an_agent_cut_off_in_a_network_namespace_stops_its_session_and_comes_back() {
    let Some(ns) = Netns::create(0) else {
        return;
    };
    let c = Cluster::start(3);
    let front = Front::start_on(ns.host_ip, vec![manager_addr(&c)]).unwrap();
    let mut a1 = c.agent_command("a1", "g", "cpu=1");
    a1.env("CORRAL_SERVER", front.url());
    let mut inside = ns.command(&a1);
    inside.stdout(Stdio::null()).stderr(Stdio::null());
    cut_off_and_back(&c, inside, || ns.cut(), || ns.mend());
}

/// Group `g` (`on_disconnect: stop`): agent a1 (started by `a1`) runs a session, a2 is idle; a1
/// is cut off (`cut`), stops the session itself, and the session runs again on a2, the two runs
/// apart; a1 is back once `mend`ed.
fn cut_off_and_back(c: &Cluster, a1: Command, cut: impl Fn(), mend: impl Fn()) {
    ok(c.cli(&["group", "create", "g"]));
    let marks = marks_dir(c);
    let _a1 = c.agent_from("a1", a1);
    let id = ticking_on(c, &marks, "g", "a1", 10);
    let _a2 = c.agent("a2", "g", "cpu=1");
    let cut_at = now_ns();
    cut();
    c.until("the session runs again on a2", || {
        let s = c.listed(&id);
        (s["agent"] == "a2" && runs(&marks).len() == 2).then_some(())
    });
    let lost = events_of(c, "a1", "lost");
    assert!(
        lost.iter().any(|m| m.contains(
            "agent a1 missed its heartbeats; 1 session(s) stay with it while it stops them itself; requeued in 2 s unless it is back"
        )),
        "{lost:?}"
    );
    let history = c.json(&["session", "get", &id, "-o", "json"])["history"].to_string();
    assert!(history.contains("requeued: agent a1 was lost"), "{history}");
    let runs = runs(&marks);
    let (first, second) = (&runs[0], &runs[1]);
    let first_end = *first.last().unwrap();
    assert!(
        first_end < second[0],
        "the two runs overlap: the first ticked until {first_end}, the second from {}",
        second[0]
    );
    // Stopped by a1 itself within lost_after (3 s) and its grace (1 s) of the cut, the last
    // sync's long poll (a heartbeat, 1 s) included: not run to its end (10 s).
    let stopped_after = Duration::from_nanos((first_end - cut_at) as u64);
    assert!(
        stopped_after < Duration::from_secs(5),
        "a1 stopped its session {stopped_after:?} after the cut"
    );
    // Back: it is alive again, told nothing of the session, which ends on a2.
    mend();
    back_and_done_elsewhere(c, &id);
}

#[test]
fn a_cut_off_agent_of_a_keep_group_runs_its_session_on_and_keeps_it() {
    let c = Cluster::start(3);
    ok(c.cli(&["group", "create", "k", "--on-disconnect", "keep"]));
    let group = ok(c.cli(&["group", "get", "k"]));
    assert!(group.contains("on disconnect"), "{group}");
    assert!(
        group
            .lines()
            .any(|l| l.contains("on disconnect") && l.contains("keep")),
        "{group}"
    );
    let marks = marks_dir(&c);
    let front = Front::start(vec![manager_addr(&c)]).unwrap();
    let _k1 = agent_through(&c, &front, "k1", "k");
    let id = ticking_on(&c, &marks, "k", "k1", 12);
    // Room elsewhere: were the session let go, it would run there.
    let _k2 = c.agent("k2", "k", "cpu=1");
    let cut_at = now_ns();
    front.cut();
    c.until("k1 is lost", || {
        let agents = c.json(&["agent", "ls", "-o", "json"]);
        agents
            .as_array()?
            .iter()
            .any(|a| a["id"] == "k1" && a["state"] == "lost")
            .then_some(())
    });
    let lost = events_of(&c, "k1", "lost");
    assert!(
        lost.iter().any(|m| m
            .contains("it keeps running them, and they are requeued only if it is gone for good")),
        "{lost:?}"
    );
    // Past the time a stop group's session would have left it (3 + 1 + 1 s), it still ticks.
    c.until("the session ticks 7 s after the cut", || {
        let runs = runs(&marks);
        let last = *runs.first()?.last()?;
        (last > cut_at + 7_000_000_000).then_some(())
    });
    let s = c.listed(&id);
    assert_eq!(s["state"], "running", "{s}");
    assert_eq!(s["agent"], "k1", "{s}");
    front.mend();
    c.until_for(30, "the session succeeds where it ran", || {
        let s = c.listed(&id);
        (s["state"] == "succeeded").then_some(())
    });
    assert_eq!(c.listed(&id)["agent"], "k1");
    assert_eq!(runs(&marks).len(), 1, "it ran once");
}

#[test]
fn an_agent_back_before_its_sessions_were_released_reports_what_it_stopped() {
    // lost_after 9 s: the agent stops its session 9 s into the cut at the latest, the manager
    // would release it 3 s + 1 s later; the agent is back in between.
    let c = Cluster::start(9);
    ok(c.cli(&["group", "create", "g"]));
    let marks = marks_dir(&c);
    let front = Front::start(vec![manager_addr(&c)]).unwrap();
    let _a1 = agent_through(&c, &front, "a1", "g");
    let id = ticking_on(&c, &marks, "g", "a1", 30);
    front.cut();
    c.until("a1 stops its session", || {
        let last = *runs(&marks).first()?.last()?;
        (now_ns() > last + 300_000_000).then_some(())
    });
    front.mend();
    c.until("the session is requeued from a1's report", || {
        let history = c.json(&["session", "get", &id, "-o", "json"])["history"].to_string();
        history
            // Its own watch or its guard, whichever stopped it first, says so.
            .contains("requeued: agent a1 stopped it: no contact with the manager")
            .then_some(history)
    });
    c.until("it runs again", || (runs(&marks).len() == 2).then_some(()));
    let runs = runs(&marks);
    assert!(runs[0].last() < runs[1].first(), "the two runs overlap");
    let history = c.json(&["session", "get", &id, "-o", "json"])["history"].to_string();
    assert!(
        !history.contains("was lost"),
        "released by the manager too: {history}"
    );
}

#[test]
fn a_frozen_agents_guard_stops_its_session_before_it_runs_again_elsewhere() {
    let c = Cluster::start(3);
    let (a1, _a2, id) = guarded_session(&c);
    // The agent alone is frozen; its session, a process group of its own, runs on.
    let agent = a1.0.id() as i32;
    // SAFETY: kill only sends a signal to the agent this test started.
    assert_eq!(unsafe { libc::kill(agent, libc::SIGSTOP) }, 0);
    stopped_before_it_runs_on_a2(&c, &id, now_ns());
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(agent, libc::SIGCONT) }, 0);
    back_and_done_elsewhere(&c, &id);
}

#[test]
fn a_dead_agents_guard_stops_its_session_before_it_runs_again_elsewhere() {
    let c = Cluster::start(3);
    let (a1, _a2, id) = guarded_session(&c);
    // SIGKILL, and reaped: its session, a process group of its own, runs on.
    drop(a1);
    stopped_before_it_runs_on_a2(&c, &id, now_ns());
    c.until_for(30, "the session succeeds on a2", || {
        (c.listed(&id)["state"] == "succeeded").then_some(())
    });
}

/// Group `g`, agent a1 running a session that ticks for 10 s (returned: a1, a2, the
/// session), a2 idle.
fn guarded_session(c: &Cluster) -> (Proc, Proc, String) {
    ok(c.cli(&["group", "create", "g"]));
    let marks = marks_dir(c);
    let a1 = c.agent("a1", "g", "cpu=1");
    let id = ticking_on(c, &marks, "g", "a1", 10);
    (a1, c.agent("a2", "g", "cpu=1"), id)
}

/// The session a1 ran stops within 5 s of `since` (a1's guard, past its deadline) and runs
/// again on a2, the two runs apart.
fn stopped_before_it_runs_on_a2(c: &Cluster, id: &str, since: u128) {
    let marks = c.dir.path().join("marks");
    c.until("the session runs again on a2", || {
        let s = c.listed(id);
        (s["agent"] == "a2" && runs(&marks).len() == 2).then_some(())
    });
    let all = runs(&marks);
    let first_end = *all[0].last().unwrap();
    assert!(
        first_end < all[1][0],
        "the two runs overlap: the first ticked until {first_end}, the second from {}",
        all[1][0]
    );
    let stopped_after = Duration::from_nanos((first_end - since) as u64);
    assert!(
        stopped_after < Duration::from_secs(5),
        "the guard stopped the session {stopped_after:?} after a1 went"
    );
}
