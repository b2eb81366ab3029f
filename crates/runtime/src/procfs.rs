//! What `/proc` says about processes, and signals to process groups.

use std::collections::HashMap;
use std::io;

/// The fields of `/proc/<pid>/stat` Corral reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `Z`...
    pub state: char,
    /// The parent (field 4): after its parent died, the nearest subreaper or init.
    pub ppid: i32,
    pub pgrp: i32,
    /// The session id (field 6).
    pub session: i32,
    /// Clock ticks after boot at which the process started: with the pid, names it uniquely.
    pub start_time: u64,
}

impl Stat {
    /// Neither a zombie nor dead.
    pub fn alive(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may
/// contain anything, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state), [1] field 4 (ppid), [2] field 5 (pgrp), [3] field 6
    // (session), [19] field 22 (starttime).
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// The stat of a process, or `None` if it does not exist.
pub fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// The value of the variable `name` in `environ`, the text of `/proc/<pid>/environ` (what the
/// process was started with: NUL-separated `NAME=value` entries).
pub fn environ_var<'a>(environ: &'a [u8], name: &str) -> Option<&'a [u8]> {
    environ.split(|&b| b == 0).find_map(|entry| {
        entry
            .strip_prefix(name.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
    })
}

/// One process as [`processes`] saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: i32,
    pub stat: Stat,
    /// The value of the variable asked for in its environment, if readable and present.
    pub var: Option<String>,
}

/// Every process in `/proc` with its stat and the value of the variable `var` in its
/// environment. Environments are read once per process: `cache` keeps what was read, by pid and
/// start time (a process keeps its environment until it execs one of its own making), and is
/// pruned to the processes seen. Zombies have no environment to read.
pub fn processes(var: &str, cache: &mut HashMap<(i32, u64), Option<String>>) -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut seen = Vec::new();
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        let Some(stat) = stat(pid) else {
            continue;
        };
        let key = (pid, stat.start_time);
        let value = match cache.get(&key) {
            Some(value) => value.clone(),
            None if stat.alive() => match std::fs::read(format!("/proc/{pid}/environ")) {
                Ok(environ) => {
                    let value =
                        environ_var(&environ, var).map(|v| String::from_utf8_lossy(v).into_owned());
                    cache.insert(key, value.clone());
                    value
                }
                // Gone, or not ours to read (another user's): nothing to cache.
                Err(_) => None,
            },
            None => None,
        };
        seen.push(Process {
            pid,
            stat,
            var: value,
        });
    }
    let live: std::collections::HashSet<(i32, u64)> =
        seen.iter().map(|p| (p.pid, p.stat.start_time)).collect();
    cache.retain(|key, _| live.contains(key));
    seen
}

/// Reaps `pid` if it is a zombie child of this process. Only for children no one else waits
/// for (orphans a subreaper inherited): reaping a child that tokio waits for would steal its
/// exit status.
pub(crate) fn reap(pid: i32) -> bool {
    if pid <= 1 {
        return false;
    }
    let mut status = 0;
    // SAFETY: waitpid(2) writes one int into `status`, which we own.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == pid }
}

/// Whether `pid` is a live (not zombie) process that started at `start_time`.
pub fn is_same_live_process(pid: i32, start_time: u64) -> bool {
    stat(pid).is_some_and(|s| s.alive() && s.start_time == start_time)
}

/// The process groups that have a live (not zombie) member in the session `sid` (a process
/// started with `setsid` and the groups it made).
pub fn session_groups(sid: i32) -> std::collections::BTreeSet<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return std::collections::BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .filter(|s| s.alive() && s.session == sid)
        .map(|s| s.pgrp)
        .collect()
}

/// Sends `signal` to every process of the group `pgid`. A group that no longer exists is no
/// error.
pub fn signal_group(pgid: i32, signal: i32) -> io::Result<()> {
    if pgid <= 1 {
        // kill(0) and kill(-1) would signal the agent's own group or every process.
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad pgid"));
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(err)
    }
}

/// Sends `signal` to one process; a process that no longer exists is no error.
pub(crate) fn signal_process(pid: i32, signal: i32) -> io::Result<()> {
    if pid <= 1 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad pid"));
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_is_parsed_past_odd_command_names() {
        let text = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 18446744073709551615";
        let s = parse_stat(text).unwrap();
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 1);
        assert_eq!((s.pgrp, s.session), (4242, 4242));
        assert_eq!(s.start_time, 987654);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn a_variable_is_found_in_an_environment() {
        let environ = b"A=1\0CORRAL_SESSION_COOKIE=abc\0CORRAL_SESSION_COOKIE_X=no\0EMPTY=\0";
        assert_eq!(
            environ_var(environ, "CORRAL_SESSION_COOKIE"),
            Some(&b"abc"[..])
        );
        assert_eq!(environ_var(environ, "EMPTY"), Some(&b""[..]));
        assert_eq!(environ_var(environ, "CORRAL_SESSION"), None);
        assert_eq!(environ_var(b"", "A"), None);
    }

    #[test]
    fn processes_are_read_with_a_variable_of_their_environment() {
        let me = std::process::id() as i32;
        let mut cache = HashMap::new();
        let all = processes("PATH", &mut cache);
        let mine = all.iter().find(|p| p.pid == me).unwrap();
        assert_eq!(mine.var, std::env::var("PATH").ok());
        assert_eq!(mine.stat.ppid, std::os::unix::process::parent_id() as i32);
        assert!(cache.contains_key(&(me, mine.stat.start_time)));
    }

    #[test]
    fn our_own_process_is_alive() {
        let me = std::process::id() as i32;
        let s = stat(me).unwrap();
        assert!(s.alive());
        assert!(is_same_live_process(me, s.start_time));
        assert!(!is_same_live_process(me, s.start_time + 1));
    }
}
