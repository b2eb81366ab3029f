//! Which processes belong to a session of the process runtime, when no cgroup can say.
//!
//! A process leaves its session's process group with `setsid` or `setpgid`, and once its parent
//! exits it is reparented (to init or the nearest subreaper), so neither its group nor its
//! parent chain lead back to the session afterwards. What it keeps is its environment: every
//! session is started with [`COOKIE_VAR`] set to a random value, which its processes inherit.
//! A process belongs to the session if it
//!
//! - carries the session's cookie in its environment,
//! - is in the session's process group (while that id is not a reused pid),
//! - was found to belong to it by an earlier look (same pid and start time), or
//! - is a child of a process that belongs to it, or in a process group or session whose
//!   leader does (a group or session id stays taken while anything is in it).
//!
//! Never the agent itself or one of its ancestors. What escapes: a process that both dropped
//! the cookie (exec'd with another environment) and left the group before any look saw it,
//! once its parent died. A cgroup, where there is one, holds every process regardless.
//!
//! [`Tracker`] looks at `/proc` for all running sessions at once, every [`LOOK_INTERVAL`], so
//! that what a session's processes become (reparented orphans, cleared environments) is known
//! by the end, and reaps the session orphans this process inherits as a subreaper (not the
//! commands run in a session, children of this process too, which their spawner waits for:
//! [`Tracker::spawn_waited`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::procfs::{self, Process};

/// The variable every process of a session is started with: a random value per start.
pub const COOKIE_VAR: &str = "CORRAL_SESSION_COOKIE";
/// The variable that tells a session's programs their session id.
pub const ID_VAR: &str = "CORRAL_SESSION_ID";

/// How often the tracker looks at the processes of running sessions.
pub(crate) const LOOK_INTERVAL: Duration = Duration::from_secs(1);

/// A process, named so that a reused pid is not mistaken for it: pid and start time.
pub(crate) type Identity = (i32, u64);

/// What identifies a session's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    /// The session's first process, whose pid is also its process group id.
    pub leader: i32,
    pub leader_start: u64,
    /// The value of [`COOKIE_VAR`]; `None` for sessions recorded before there was one.
    pub cookie: Option<String>,
}

/// The processes of `procs` that belong to the session `mark` (see the module's rules), zombies
/// included; `known` are identities found by earlier looks, `me` is the agent's pid.
pub(crate) fn members<'a>(
    procs: &'a [Process],
    mark: &Mark,
    known: &HashSet<Identity>,
    me: i32,
) -> Vec<&'a Process> {
    let by_pid: HashMap<i32, &Process> = procs.iter().map(|p| (p.pid, p)).collect();
    // The agent and its ancestors are never killed, even if they carry the cookie (an agent
    // run inside a session).
    let mut spared: HashSet<i32> = HashSet::from([0, 1]);
    let mut pid = me;
    while spared.insert(pid) {
        match by_pid.get(&pid) {
            Some(p) => pid = p.stat.ppid,
            None => break,
        }
    }
    // Once the leader is gone its pid may be reused; its group id is then someone else's.
    let leader_reused = by_pid
        .get(&mark.leader)
        .is_some_and(|p| p.stat.start_time != mark.leader_start);
    let mut member: HashSet<i32> = procs
        .iter()
        .filter(|p| !spared.contains(&p.pid))
        .filter(|p| {
            (mark.cookie.is_some() && p.var == mark.cookie)
                || known.contains(&(p.pid, p.stat.start_time))
                || (!leader_reused && p.stat.pgrp == mark.leader)
        })
        .map(|p| p.pid)
        .collect();
    loop {
        let before = member.len();
        for p in procs {
            if spared.contains(&p.pid) || member.contains(&p.pid) {
                continue;
            }
            // A member (zombies too) holds its pid, so a group or session of that id is its.
            if [p.stat.ppid, p.stat.pgrp, p.stat.session]
                .iter()
                .any(|id| member.contains(id))
            {
                member.insert(p.pid);
            }
        }
        if member.len() == before {
            break;
        }
    }
    procs.iter().filter(|p| member.contains(&p.pid)).collect()
}

/// The members that are zombie orphans of `me`, which only `me` can reap: not the leader, which
/// the runtime waits for itself.
pub(crate) fn orphans_to_reap(members: &[&Process], mark: &Mark, me: i32) -> Vec<i32> {
    members
        .iter()
        .filter(|p| !p.stat.alive() && p.stat.ppid == me && p.pid != mark.leader)
        .map(|p| p.pid)
        .collect()
}

#[derive(Debug)]
struct Watched {
    mark: Mark,
    known: HashSet<Identity>,
}

/// The running sessions' processes, as last seen.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    sessions: Mutex<HashMap<String, Watched>>,
    /// Cookies read from environments, by identity. Its lock makes looks take turns, so that
    /// each starts from what the one before it found.
    environ: Mutex<HashMap<Identity, Option<String>>>,
    /// Children of this process that carry a session's cookie but are waited for by their
    /// spawner (commands run in a session), so never reaped as orphans.
    waited: Mutex<HashSet<i32>>,
}

/// A child that [`Tracker::spawn_waited`] keeps from being reaped as an orphan, until dropped
/// (once its spawner reaped it).
#[derive(Debug)]
pub(crate) struct Waited {
    tracker: Arc<Tracker>,
    pid: i32,
}

impl Drop for Waited {
    fn drop(&mut self) {
        self.tracker.waited().remove(&self.pid);
    }
}

impl Tracker {
    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Watched>> {
        // Every update is one insert or remove: a panic leaves the map consistent.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn waited(&self) -> std::sync::MutexGuard<'_, HashSet<i32>> {
        // Every update is one insert or remove: a panic leaves the set consistent.
        self.waited.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocking. Spawns, between two looks, a child that carries a session's cookie and that
    /// the caller waits for itself (`spawn` returns it and its pid): no look reaps it before
    /// the returned [`Waited`] is dropped, even if it ends at once.
    pub fn spawn_waited<T>(
        self: &Arc<Self>,
        spawn: impl FnOnce() -> std::io::Result<(T, i32)>,
    ) -> std::io::Result<(T, Waited)> {
        let _turn = self.environ.lock().unwrap_or_else(|e| e.into_inner());
        let (child, pid) = spawn()?;
        self.waited().insert(pid);
        let waited = Waited {
            tracker: Arc::clone(self),
            pid,
        };
        Ok((child, waited))
    }

    pub fn watch(&self, id: &str, mark: Mark) {
        self.sessions().insert(
            id.to_string(),
            Watched {
                mark,
                known: HashSet::new(),
            },
        );
    }

    pub fn forget(&self, id: &str) {
        self.sessions().remove(id);
    }

    /// Counts `pids` (of the session's cgroup, say) among the session's processes: their
    /// zombies, orphans of a subreaper, are then reaped.
    pub fn remember(&self, id: &str, pids: &[i32]) {
        // Between looks, not lost to one that started before.
        let _turn = self.environ.lock().unwrap_or_else(|e| e.into_inner());
        let identities: Vec<Identity> = pids
            .iter()
            .filter_map(|&pid| Some((pid, procfs::stat(pid)?.start_time)))
            .collect();
        if let Some(w) = self.sessions().get_mut(id) {
            w.known.extend(identities);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sessions().is_empty()
    }

    /// Blocking. One look at `/proc` for every watched session: remembers their processes and
    /// reaps their orphans that died.
    pub fn look(&self) {
        let mut cache = self.environ.lock().unwrap_or_else(|e| e.into_inner());
        let watched: Vec<(String, Mark)> = self
            .sessions()
            .iter()
            .map(|(id, w)| (id.clone(), w.mark.clone()))
            .collect();
        if watched.is_empty() {
            return;
        }
        let procs = procfs::processes(COOKIE_VAR, &mut cache);
        for (id, mark) in watched {
            self.settle(&id, &mark, &procs);
        }
    }

    /// Blocking. The processes of the session `id` now (zombies included), found by `mark`
    /// and what earlier looks saw; its orphans that died are reaped.
    pub fn members_of(&self, id: &str, mark: &Mark) -> Vec<Process> {
        let mut cache = self.environ.lock().unwrap_or_else(|e| e.into_inner());
        let procs = procfs::processes(COOKIE_VAR, &mut cache);
        self.settle(id, mark, &procs)
    }

    /// Finds the session's processes in `procs` and remembers them. Called with the look lock
    /// held: what it starts from is what the look before found.
    fn settle(&self, id: &str, mark: &Mark, procs: &[Process]) -> Vec<Process> {
        let me = std::process::id() as i32;
        let known = self
            .sessions()
            .get(id)
            .map(|w| w.known.clone())
            .unwrap_or_default();
        let found = members(procs, mark, &known, me);
        let waited = self.waited().clone();
        for pid in orphans_to_reap(&found, mark, me) {
            if !waited.contains(&pid) {
                procfs::reap(pid);
            }
        }
        let identities = found.iter().map(|p| (p.pid, p.stat.start_time)).collect();
        if let Some(w) = self.sessions().get_mut(id) {
            w.known = identities;
        }
        found.into_iter().cloned().collect()
    }
}

/// A random cookie for [`COOKIE_VAR`]: 128 bits in hex, so no two sessions on a host (of
/// this agent or another) share one.
pub(crate) fn new_cookie() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random source works");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::Stat;

    const ME: i32 = 100;
    const LEADER: i32 = 200;
    const COOKIE: &str = "c00c1e";

    /// A process: pid, parent, group, session, state, cookie.
    fn p(
        pid: i32,
        ppid: i32,
        pgrp: i32,
        session: i32,
        state: char,
        cookie: Option<&str>,
    ) -> Process {
        Process {
            pid,
            stat: Stat {
                state,
                ppid,
                pgrp,
                session,
                start_time: 1000 + pid as u64,
            },
            var: cookie.map(str::to_string),
        }
    }

    fn mark() -> Mark {
        Mark {
            leader: LEADER,
            leader_start: 1000 + LEADER as u64,
            cookie: Some(COOKIE.into()),
        }
    }

    fn pids(found: &[&Process]) -> Vec<i32> {
        let mut pids: Vec<i32> = found.iter().map(|p| p.pid).collect();
        pids.sort();
        pids
    }

    /// The agent (100, a subreaper, under init), a session led by 200 in the agent's session
    /// 50, and what its processes became.
    fn host() -> Vec<Process> {
        vec![
            p(1, 0, 1, 1, 'S', None),
            p(100, 1, 50, 50, 'S', None),
            // The leader and a plain child.
            p(200, ME, LEADER, 50, 'S', Some(COOKIE)),
            p(201, 200, LEADER, 50, 'S', Some(COOKIE)),
            // `setsid sleep &` after its parent died: its own session, reparented to the agent.
            p(300, ME, 300, 300, 'S', Some(COOKIE)),
            // Its child that cleared its environment: a descendant.
            p(301, 300, 300, 300, 'S', None),
            // A double-forked daemon without the cookie, orphaned to init, still in the
            // session 300 its member leader made.
            p(302, 1, 302, 300, 'S', None),
            // A group leader of the session's that died, and what is left in its group.
            p(400, ME, 400, 50, 'Z', None),
            p(401, 1, 400, 50, 'S', None),
            // Others: the agent's other children (another session's leader, a plugin), a
            // daemon of the host, and another session's process.
            p(500, ME, 500, 50, 'S', Some("other")),
            p(501, ME, 501, 50, 'S', None),
            p(600, 1, 600, 600, 'S', None),
            p(601, 500, 500, 50, 'S', Some("other")),
        ]
    }

    #[test]
    fn the_session_is_found_by_cookie_group_and_descent() {
        let procs = host();
        let found = members(&procs, &mark(), &HashSet::new(), ME);
        // 400 and 401 are found only if an earlier look saw 400 (a zombie without cookie).
        assert_eq!(pids(&found), [200, 201, 300, 301, 302]);
        let known = HashSet::from([(400, 1400)]);
        let found = members(&procs, &mark(), &known, ME);
        assert_eq!(pids(&found), [200, 201, 300, 301, 302, 400, 401]);
        // Of those, the agent reaps only its own zombie orphans.
        assert_eq!(orphans_to_reap(&found, &mark(), ME), [400]);
    }

    #[test]
    fn a_known_process_stays_a_member_only_with_its_start_time() {
        let mut procs = host();
        procs.push(p(700, 1, 700, 700, 'S', None));
        let known = HashSet::from([(700, 1700)]);
        assert!(pids(&members(&procs, &mark(), &known, ME)).contains(&700));
        // The same pid, started later: another process.
        let known = HashSet::from([(700, 99)]);
        assert!(!pids(&members(&procs, &mark(), &known, ME)).contains(&700));
    }

    #[test]
    fn a_reused_leader_pid_does_not_name_the_group() {
        // The leader ended and its pid went to a stranger, who made a group of it.
        let procs = vec![
            p(100, 1, 50, 50, 'S', None),
            Process {
                pid: LEADER,
                stat: Stat {
                    state: 'S',
                    ppid: 1,
                    pgrp: LEADER,
                    session: LEADER,
                    start_time: 5,
                },
                var: None,
            },
            p(201, LEADER, LEADER, LEADER, 'S', None),
        ];
        assert!(members(&procs, &mark(), &HashSet::new(), ME).is_empty());
        // The leader ended, its group lives on: the group id cannot have been reused.
        let procs = vec![
            p(100, 1, 50, 50, 'S', None),
            p(201, 1, LEADER, 50, 'S', None),
        ];
        assert_eq!(pids(&members(&procs, &mark(), &HashSet::new(), ME)), [201]);
    }

    #[test]
    fn the_agent_and_its_ancestors_are_never_members() {
        // An agent run inside the session: it and its parent carry the cookie.
        let procs = vec![
            p(1, 0, 1, 1, 'S', None),
            p(90, 1, LEADER, 50, 'S', Some(COOKIE)),
            p(100, 90, LEADER, 50, 'S', Some(COOKIE)),
            p(110, 100, 110, 50, 'S', None),
            p(120, 90, LEADER, 50, 'S', Some(COOKIE)),
        ];
        assert_eq!(pids(&members(&procs, &mark(), &HashSet::new(), ME)), [120]);
        // Without a cookie, a session recorded before cookies is found by its group.
        let old = Mark {
            cookie: None,
            ..mark()
        };
        let procs = host();
        assert_eq!(
            pids(&members(&procs, &old, &HashSet::new(), ME)),
            [200, 201]
        );
    }

    #[test]
    fn cookies_are_random_hex() {
        let (a, b) = (new_cookie(), new_cookie());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
