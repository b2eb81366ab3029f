//! One manager per SQLite data directory. A second `corral server` (or `corral dev`) on the same
//! directory would run every group's passes and scaling driver beside the first, and launch
//! every instance twice. The first holds a POSIX record lock on `<data dir>/manager.lock` for
//! its life, which the kernel lets go when the process ends, however it ends; a second is
//! refused, naming the first's pid. Managers meant to run side by side share a PostgreSQL
//! database instead (`--database-url`).
//!
//! A record lock belongs to the process: a manager started again in the same process (as tests
//! do) takes it again.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::ManagerError;

/// The lock, held while this value lives.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

/// Takes the data directory's lock, or says which process holds it.
pub fn take(dir: &Path) -> Result<DataDirLock, ManagerError> {
    let path = dir.join("manager.lock");
    let io_error = |source| ManagerError::Io {
        context: format!("lock file {}", path.display()),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io_error)?;
    let mut lock = whole_file();
    // SAFETY: `fcntl` reads a valid `flock` for an open descriptor this function owns.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) } == 0 {
        return Ok(DataDirLock { _file: file });
    }
    let error = io::Error::last_os_error();
    if !matches!(error.raw_os_error(), Some(libc::EACCES | libc::EAGAIN)) {
        return Err(io_error(error));
    }
    // SAFETY: as above; F_GETLK writes the holder into `lock`.
    let found = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut lock) } == 0
        && lock.l_type != libc::F_UNLCK as libc::c_short;
    Err(ManagerError::DataDirInUse {
        dir: dir.to_path_buf(),
        pid: found.then_some(lock.l_pid),
    })
}

/// A write lock over the whole file.
fn whole_file() -> libc::flock {
    // SAFETY: `flock` is plain data; all zeroes is a valid value (offset 0, length 0: to the end).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock
}
