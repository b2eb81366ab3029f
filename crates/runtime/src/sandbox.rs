//! The process runtime's sandbox: what keeps a session from the agent and from other sessions
//! on the same host (docs/security.md).
//!
//! A sandboxed session runs in a mount namespace and a PID namespace of its own:
//! - the agent's work directory (every session's files, the agent's own) and the paths the
//!   agent was told to hide (`--hide`: a pilot's shared work directory, the scheduler's
//!   credentials socket) are covered by an empty tmpfs; only the session's own working
//!   directory is mounted back, at the same path;
//! - `/tmp` is the session's own directory (`<session>/tmp`) and `/dev/shm` a fresh tmpfs;
//! - `/proc` shows the session's own processes alone: not the agent's environment or memory,
//!   nor another session's.
//!
//! Who it runs as: an agent running as root runs each session as a uid of its own from a pool
//! (`SandboxConfig::uids`, one per running session, with the same gid and no supplementary
//! group), so sessions cannot read each other's files or signal each other, and cannot undo
//! the mounts. An agent of an ordinary account cannot change uid: its sessions run as that
//! account inside a user namespace it makes (unprivileged), which is what lets it make the
//! other namespaces; the session has no capability once it runs, so it cannot undo them
//! either, and a namespace it makes itself gets the mounts locked.
//!
//! The session's program runs as process 2 of its PID namespace: process 1 reaps and, once the
//! program ended, ends what it left (SIGTERM, SIGKILL after the runtime's grace) and tells the
//! process the agent started (which stays outside, so the agent's tracking and signals work as
//! for any session) how the program ended, which that process then ends the same way.
//!
//! Everything that runs between `fork` and `exec` is a plain system call on values computed
//! before the fork: no allocation, no lock.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

/// Whether sessions are sandboxed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Sandboxed where this host can (checked once at start); unsandboxed, with a warning,
    /// where it cannot.
    Auto,
    /// Always: a session that cannot be sandboxed fails to start (pilot agents).
    On,
    /// Never: sessions see all the agent's account sees. The default for now (sessions that
    /// share files with their host by absolute paths under /tmp, or run as root, keep working);
    /// docs/security.md says when to turn it on.
    #[default]
    Off,
}

/// The first uid of the pool root agents run sessions as, unless configured.
pub const DEFAULT_FIRST_UID: u32 = 1_900_000_000;
/// How many uids the default pool holds (the most sessions one agent runs at once).
pub const DEFAULT_UID_COUNT: u32 = 65_536;

/// The sandbox's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    pub isolation: Isolation,
    /// Paths covered for sessions besides the agent's work directory.
    pub hide: Vec<PathBuf>,
    /// The uids (and gids) a root agent runs sessions as: `first..first + count`.
    pub first_uid: u32,
    pub uid_count: u32,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            isolation: Isolation::default(),
            hide: Vec::new(),
            first_uid: DEFAULT_FIRST_UID,
            uid_count: DEFAULT_UID_COUNT,
        }
    }
}

/// The uids of running sessions, for a root agent.
#[derive(Debug, Default)]
pub(crate) struct UidPool {
    used: Mutex<std::collections::BTreeSet<u32>>,
}

impl UidPool {
    /// The lowest free uid of `first..first + count`, now taken.
    pub(crate) fn take(&self, first: u32, count: u32) -> Option<u32> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let uid = (first..first.saturating_add(count)).find(|u| !used.contains(u))?;
        used.insert(uid);
        Some(uid)
    }

    /// Marks `uid` taken (a session found again after a restart).
    pub(crate) fn keep(&self, uid: u32) {
        self.used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid);
    }

    pub(crate) fn give_back(&self, uid: u32) {
        self.used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&uid);
    }
}

/// Whether this process runs as root (and so switches sessions to uids of their own).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// The paths a sandbox covers, in mount order: none inside another (that one covers it).
pub(crate) fn covered(work_root: &Path, hide: &[PathBuf]) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::iter::once(work_root.to_path_buf())
        .chain(hide.iter().cloned())
        .map(|p| normal(&p))
        .collect();
    all.sort();
    all.dedup();
    let mut kept: Vec<PathBuf> = Vec::new();
    for path in all {
        if !kept.iter().any(|k| path.starts_with(k)) {
            kept.push(path);
        }
    }
    kept
}

/// `path` absolute with `.` and `..` taken out by name (the paths are the agent's own).
fn normal(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::from("/");
    for c in absolute.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// Each ancestor of `path` and itself, from the root down (what `mkdir -p` makes).
fn ancestors_down(path: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = path.ancestors().map(Path::to_path_buf).collect();
    all.reverse();
    all.retain(|p| p.as_os_str().len() > 1);
    all
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds a NUL byte"))
}

fn c_text(text: &str) -> CString {
    CString::new(text).expect("no NUL in a text made here")
}

/// Who the session runs as.
#[derive(Debug, Clone, Copy)]
enum Identity {
    /// A root agent: this uid and gid, no supplementary group.
    Switch { uid: u32, gid: u32 },
    /// An ordinary agent: its own ids, mapped into a user namespace.
    Map { uid: u32, gid: u32 },
}

/// One session's sandbox, made ready before the fork; [`Sandbox::enter`] runs after it.
#[derive(Debug)]
pub(crate) struct Sandbox {
    identity: Identity,
    uid_map: CString,
    gid_map: CString,
    covered: Vec<CString>,
    /// `mkdir -p` of the working directory's path once the covers are on.
    work_path: Vec<CString>,
    work: CString,
    /// The session's own `/tmp`.
    tmp: CString,
    leftover_grace_ms: u64,
}

const PROC_SELF_SETGROUPS: &std::ffi::CStr = c"/proc/self/setgroups";
const PROC_SELF_UID_MAP: &std::ffi::CStr = c"/proc/self/uid_map";
const PROC_SELF_GID_MAP: &std::ffi::CStr = c"/proc/self/gid_map";

impl Sandbox {
    /// Prepares the sandbox of a session working in `work`, with its own `/tmp` in `tmp`
    /// (both made already), covering `covered`; `uid` is the pool's uid for a root agent.
    pub(crate) fn new(
        work: &Path,
        tmp: &Path,
        covered: &[PathBuf],
        uid: Option<u32>,
        leftover_grace: std::time::Duration,
    ) -> io::Result<Sandbox> {
        let identity = match uid {
            Some(uid) => Identity::Switch { uid, gid: uid },
            // SAFETY: getuid and getgid cannot fail and touch no memory.
            None => unsafe {
                Identity::Map {
                    uid: libc::getuid(),
                    gid: libc::getgid(),
                }
            },
        };
        let (uid_map, gid_map) = match identity {
            Identity::Map { uid, gid } => (
                c_text(&format!("{uid} {uid} 1\n")),
                c_text(&format!("{gid} {gid} 1\n")),
            ),
            Identity::Switch { .. } => (c_text(""), c_text("")),
        };
        let work_abs = normal(work);
        Ok(Sandbox {
            identity,
            uid_map,
            gid_map,
            covered: covered
                .iter()
                .map(|p| c_path(p))
                .collect::<io::Result<_>>()?,
            work_path: ancestors_down(&work_abs)
                .iter()
                .map(|p| c_path(p))
                .collect::<io::Result<_>>()?,
            work: c_path(&work_abs)?,
            tmp: c_path(&normal(tmp))?,
            leftover_grace_ms: leftover_grace.as_millis() as u64,
        })
    }

    /// Runs in the child between fork and exec. Returns in the program's process alone (to
    /// exec it); the other two processes it makes end inside.
    ///
    /// # Safety
    /// Only between fork and exec of a single-threaded child.
    pub(crate) unsafe fn enter(&self) -> io::Result<()> {
        let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID;
        match self.identity {
            Identity::Switch { .. } => {
                // Root: drop root's supplementary groups before anything else inherits them.
                check(libc::setgroups(0, std::ptr::null()))?;
            }
            Identity::Map { .. } => flags |= libc::CLONE_NEWUSER,
        }
        check(libc::unshare(flags))?;
        if let Identity::Map { .. } = self.identity {
            // A non-dumpable process (the agent, and so this fork of it) has its /proc files
            // owned by root: dumpable just long enough to write its own maps, then not again,
            // as the two processes that never exec hold a copy of the agent's memory.
            check(libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0))?;
            let written = write_file(PROC_SELF_SETGROUPS, b"deny")
                .and_then(|()| write_file(PROC_SELF_UID_MAP, self.uid_map.as_bytes()))
                .and_then(|()| write_file(PROC_SELF_GID_MAP, self.gid_map.as_bytes()));
            check(libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0))?;
            written?;
        }
        // Nothing mounted here reaches the host's namespace.
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        // Held open while the covers hide their paths, to be mounted back from. Opened in the
        // new namespace: a mount is made from a mount of one's own namespace only.
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        let work_fd = check(libc::open(self.work.as_ptr(), flags))?;
        let tmp_fd = check(libc::open(self.tmp.as_ptr(), flags))?;
        let (mut work_link, mut tmp_link) = ([0u8; 32], [0u8; 32]);
        // The session's own /tmp first: the covers and the working directory may lie under
        // /tmp, and are made again on top of it.
        bind(fd_link(tmp_fd, &mut tmp_link), c"/tmp")?;
        for path in &self.covered {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::stat(path.as_ptr(), &mut st) != 0 {
                continue; // not there (or under /tmp, covered already)
            }
            check(libc::mount(
                c"tmpfs".as_ptr(),
                path.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=0755,size=1m".as_ptr().cast(),
            ))?;
        }
        for dir in &self.work_path {
            if libc::mkdir(dir.as_ptr(), 0o755) != 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(e);
                }
            }
        }
        bind(fd_link(work_fd, &mut work_link), self.work.as_c_str())?;
        libc::close(work_fd);
        libc::close(tmp_fd);
        let mut st: libc::stat = std::mem::zeroed();
        if libc::stat(c"/dev/shm".as_ptr(), &mut st) == 0 {
            check(libc::mount(
                c"tmpfs".as_ptr(),
                c"/dev/shm".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=1777".as_ptr().cast(),
            ))?;
        }
        // The working directory was entered before the mounts: enter it again, on top.
        check(libc::chdir(self.work.as_ptr()))?;

        let mut status_pipe = [0; 2];
        check(libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC))?;
        let [read_end, write_end] = status_pipe;
        let init = check(libc::fork())?;
        if init > 0 {
            // Outside: the process the agent knows. It lives as long as the namespace and ends
            // as the program ended.
            close_all_but(read_end);
            ignore_stop_signals();
            relay(read_end, init);
        }
        // Process 1 of the new PID namespace.
        check(libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ))?;
        let program = check(libc::fork())?;
        if program > 0 {
            close_all_but(write_end);
            reap(program, write_end, self.leftover_grace_ms);
        }
        // Process 2: the program.
        libc::close(read_end);
        libc::close(write_end);
        if let Identity::Switch { uid, gid } = self.identity {
            check(libc::setgid(gid))?;
            check(libc::setuid(uid))?;
        }
        // No setuid program gives it back what it gave up.
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        Ok(())
    }
}

/// Whether the last call was interrupted by a signal (reads errno; allocates nothing).
fn interrupted() -> bool {
    io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `/proc/self/fd/<fd>` written into `buf`, without allocating.
fn fd_link(fd: libc::c_int, buf: &mut [u8; 32]) -> &std::ffi::CStr {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let (mut n, mut count) = (fd.unsigned_abs(), 0);
    loop {
        digits[count] = b'0' + (n % 10) as u8;
        count += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..count {
        buf[PREFIX.len() + i] = digits[count - 1 - i];
    }
    buf[PREFIX.len() + count] = 0;
    std::ffi::CStr::from_bytes_until_nul(&buf[..]).unwrap_or(c"/")
}

unsafe fn bind(source: &std::ffi::CStr, target: &std::ffi::CStr) -> io::Result<()> {
    check(libc::mount(
        source.as_ptr(),
        target.as_ptr(),
        std::ptr::null(),
        libc::MS_BIND | libc::MS_REC,
        std::ptr::null(),
    ))?;
    Ok(())
}

unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    let fd = check(libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC))?;
    let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    libc::close(fd);
    if written != bytes.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Closes every descriptor from 3 up but `keep`: above all the spawner's pipe, which must see
/// its end closed by the program's exec alone.
unsafe fn close_all_but(keep: libc::c_int) {
    let close_range = |first: libc::c_uint, last: libc::c_uint| {
        if first > last {
            return;
        }
        if libc::syscall(libc::SYS_close_range, first, last, 0) != 0 {
            // Before Linux 5.9: one by one, up to the limit of open files.
            let mut limit: libc::rlimit = std::mem::zeroed();
            let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                (limit.rlim_cur as u64).min(1 << 20) as libc::c_uint
            } else {
                4096
            };
            for fd in first..=last.min(top) {
                libc::close(fd as libc::c_int);
            }
        }
    };
    let keep = keep as libc::c_uint;
    if keep > 3 {
        close_range(3, keep - 1);
    }
    close_range(keep + 1, libc::c_uint::MAX);
}

/// The process outside ignores what a stop sends the session's group: the program gets it
/// (and process 1 tells how it ended).
unsafe fn ignore_stop_signals() {
    for signal in [
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ] {
        libc::signal(signal, libc::SIG_IGN);
    }
}

/// Outside: waits for process 1's word on how the program ended, then for process 1, and
/// ends the same way.
unsafe fn relay(read_end: libc::c_int, init: libc::pid_t) -> ! {
    let mut status: libc::c_int = 0;
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < buf.len() {
        let n = libc::read(read_end, buf[got..].as_mut_ptr().cast(), buf.len() - got);
        if n > 0 {
            got += n as usize;
        } else if n < 0 && interrupted() {
            continue;
        } else {
            break;
        }
    }
    let told = got == buf.len();
    if told {
        status = libc::c_int::from_ne_bytes(buf);
    }
    let mut init_status = 0;
    while libc::waitpid(init, &mut init_status, 0) < 0 && interrupted() {}
    if !told {
        // Process 1 died before it could tell (killed from outside): say it as its end.
        status = init_status;
    }
    end_as(status)
}

unsafe fn end_as(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), signal);
        libc::_exit(128 + signal);
    }
    libc::_exit(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        127
    })
}

/// Process 1: reaps until the program ends, tells how, then ends what it left: SIGTERM, and
/// after `grace_ms` its own end, which kills the rest.
unsafe fn reap(program: libc::pid_t, write_end: libc::c_int, grace_ms: u64) -> ! {
    let mut status = 0;
    loop {
        let pid = libc::waitpid(-1, &mut status, 0);
        if pid == program {
            break;
        }
        if pid < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
            libc::_exit(127);
        }
    }
    let bytes = status.to_ne_bytes();
    libc::write(write_end, bytes.as_ptr().cast(), bytes.len());
    libc::close(write_end);
    libc::kill(-1, libc::SIGTERM);
    let step = libc::timespec {
        tv_sec: 0,
        tv_nsec: 20_000_000,
    };
    for _ in 0..grace_ms.div_ceil(20) {
        let mut s = 0;
        loop {
            let pid = libc::waitpid(-1, &mut s, libc::WNOHANG);
            if pid < 0 {
                libc::_exit(0); // nothing left
            }
            if pid == 0 {
                break;
            }
        }
        libc::nanosleep(&step, std::ptr::null_mut());
    }
    libc::_exit(0)
}

/// Whether this host can make a session's sandbox: tried once on a throwaway process.
pub fn available(work_root: &Path) -> Result<(), String> {
    let probe = tempfile::Builder::new()
        .prefix(".sandbox-probe")
        .tempdir_in(work_root)
        .map_err(|e| format!("making a probe directory in {}: {e}", work_root.display()))?;
    let work = probe.path().join("work");
    let tmp = probe.path().join("tmp");
    for dir in [&work, &tmp] {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    let uid = is_root().then_some(DEFAULT_FIRST_UID);
    if let Some(uid) = uid {
        chown_tree(probe.path(), uid).map_err(|e| e.to_string())?;
    }
    let sandbox = Sandbox::new(
        &work,
        &tmp,
        &covered(work_root, &[]),
        uid,
        std::time::Duration::ZERO,
    )
    .map_err(|e| e.to_string())?;
    let mut command = std::process::Command::new("/bin/sh");
    command
        // The program is process 2 of its own PID namespace.
        .args(["-c", "test \"$$\" = 2"])
        .current_dir(&work)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: `enter` is made for exactly this place: between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(move || sandbox.enter());
    }
    let out = command.output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "a sandboxed probe {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Gives `dir` and everything in it to `uid` (and the gid of the same number).
pub(crate) fn chown_tree(dir: &Path, uid: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(uid))?;
    if dir.is_dir() && !dir.is_symlink() {
        for entry in std::fs::read_dir(dir)? {
            chown_tree(&entry?.path(), uid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_keep_the_outermost_of_nested_paths() {
        let got = covered(
            Path::new("/w/pilots/p1/work"),
            &["/w".into(), "/run/munge".into(), "/w/x/../pilots".into()],
        );
        assert_eq!(got, vec![PathBuf::from("/run/munge"), PathBuf::from("/w")]);
        let got = covered(Path::new("/a/b"), &["/a/bc".into()]);
        assert_eq!(got, vec![PathBuf::from("/a/b"), PathBuf::from("/a/bc")]);
    }

    #[test]
    fn descriptor_links_are_written_in_place() {
        let mut buf = [0u8; 32];
        assert_eq!(fd_link(7, &mut buf), c"/proc/self/fd/7");
        assert_eq!(fd_link(1024, &mut buf), c"/proc/self/fd/1024");
        assert_eq!(fd_link(i32::MAX, &mut buf), c"/proc/self/fd/2147483647");
    }

    #[test]
    fn the_pool_gives_distinct_uids_and_takes_them_back() {
        let pool = UidPool::default();
        assert_eq!(pool.take(10, 2), Some(10));
        pool.keep(11);
        assert_eq!(pool.take(10, 2), None);
        pool.give_back(10);
        assert_eq!(pool.take(10, 2), Some(10));
    }
}
