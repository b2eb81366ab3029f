//! What `/proc` says about processes, and signals to process groups.

use std::io;

/// The fields of `/proc/<pid>/stat` Corral reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `Z`...
    pub state: char,
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
    // fields[0] is field 3 (state), [2] field 5 (pgrp), [3] field 6 (session), [19] field 22
    // (starttime).
    Some(Stat {
        state: fields.first()?.chars().next()?,
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

/// The live (not zombie) processes of a process group.
pub(crate) fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|s| s.alive() && s.pgrp == pgid))
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
        assert_eq!((s.pgrp, s.session), (4242, 4242));
        assert_eq!(s.start_time, 987654);
        assert!(parse_stat("garbage").is_none());
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
