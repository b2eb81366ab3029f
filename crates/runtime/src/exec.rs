//! Running a command inside a running session (`corral session exec`, `corral session shell`):
//! what to run ([`ExecRequest`]), what the caller gets back ([`Execution`]: its pipes, a
//! [`Resizer`] for its terminal, its exit), and the pseudo-terminal the process runtime gives
//! a command that asks for one. Each runtime's part lives beside it (`process/exec.rs`,
//! `docker/exec.rs`).
//!
//! A pseudo-terminal here: its two fds are opened close-on-exec (no other child of the agent
//! inherits them, even one forked by another thread meanwhile), the master non-blocking and
//! read and written through tokio's [`AsyncFd`]. Once every holder of the slave side closed
//! it, reading the master fails with `EIO`: that is the end of the output, read as EOF. A
//! terminal has no end of input but its `VEOF` character (^D): dropping (or shutting down) the
//! terminal's stdin writes it once, which a program reading lines from the terminal takes as
//! EOF; one that put the terminal in raw mode reads it as a plain ^D.

use std::ffi::CStr;
use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::{Exit, RuntimeError};

/// What to run in a running session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecRequest {
    /// Program and arguments; empty means a login shell (`/bin/bash -l` if the session's
    /// filesystem has /bin/bash, else `/bin/sh -l`).
    pub command: Vec<String>,
    /// Run on a pseudo-terminal (stdout and stderr then one stream).
    pub tty: bool,
    /// First terminal size (0 means unknown: leave the default).
    pub cols: u16,
    pub rows: u16,
}

impl ExecRequest {
    /// Checks what no runtime can run: an argument with NUL.
    pub(crate) fn validate(&self, id: &str) -> Result<(), RuntimeError> {
        if self.command.iter().any(|arg| arg.contains('\0')) {
            return Err(RuntimeError::InvalidSpec {
                id: id.to_string(),
                reason: "the command to run in it contains NUL".into(),
            });
        }
        Ok(())
    }
}

/// A command running in a session.
pub struct Execution {
    /// Its input; dropping it ends the input (see the module for a terminal).
    pub stdin: Pin<Box<dyn AsyncWrite + Send>>,
    /// Its output, to EOF once it and everything holding its output ended.
    pub stdout: Pin<Box<dyn AsyncRead + Send>>,
    /// `None` with a tty (stderr goes to the terminal).
    pub stderr: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// Resizes its terminal; does nothing without one.
    pub resizer: Resizer,
    /// How it ended. Reading its output keeps it going: a command blocked on a full pipe
    /// does not end (and Docker's exit is known once the output was read to its end).
    pub exit: Pin<Box<dyn Future<Output = Exit> + Send>>,
}

impl fmt::Debug for Execution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Execution")
            .field("tty", &self.stderr.is_none())
            .finish_non_exhaustive()
    }
}

/// Resizes the terminal of an [`Execution`].
pub struct Resizer(Resize);

enum Resize {
    /// No terminal.
    None,
    /// The master side of the process runtime's pseudo-terminal.
    Pty(Arc<AsyncFd<File>>),
    /// A Docker exec instance.
    Docker {
        docker: bollard::Docker,
        exec: String,
    },
}

impl Resizer {
    pub(crate) fn none() -> Self {
        Resizer(Resize::None)
    }

    pub(crate) fn docker(docker: bollard::Docker, exec: String) -> Self {
        Resizer(Resize::Docker { docker, exec })
    }

    /// Sets the terminal's size in columns and rows; a 0 keeps that dimension as it is (a
    /// Docker terminal needs both: with a 0 nothing changes). Without a terminal, nothing.
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), RuntimeError> {
        match &self.0 {
            Resize::None => Ok(()),
            Resize::Pty(master) => set_size(master.get_ref().as_raw_fd(), cols, rows)
                .map_err(|e| RuntimeError::io("resizing the terminal", e)),
            Resize::Docker { docker, exec } => {
                crate::docker::resize_exec(docker, exec, cols, rows).await
            }
        }
    }
}

/// A pseudo-terminal just opened: the master for the agent, the slave for the command.
pub(crate) struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

impl Pty {
    /// Opens a pseudo-terminal of `cols` by `rows` (a 0 leaves that dimension at the default),
    /// both fds close-on-exec, the master non-blocking.
    pub(crate) fn open(cols: u16, rows: u16) -> io::Result<Pty> {
        // SAFETY: posix_openpt(3) opens a new fd, owned at once by the OwnedFd.
        let master = unsafe {
            let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(fd)
        };
        let fd = master.as_raw_fd();
        let mut name = [0 as libc::c_char; 128];
        // SAFETY: grantpt(3), unlockpt(3) take the master's fd; ptsname_r(3) writes a
        // NUL-terminated name of at most `name.len()` bytes into `name`, which we own.
        let slave_name = unsafe {
            check(libc::grantpt(fd))?;
            check(libc::unlockpt(fd))?;
            let rc = libc::ptsname_r(fd, name.as_mut_ptr(), name.len());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            CStr::from_ptr(name.as_ptr())
        };
        // SAFETY: open(2) on a NUL-terminated path; the new fd is owned at once.
        let slave = unsafe {
            let fd = libc::open(
                slave_name.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(fd)
        };
        set_size(fd, cols, rows)?;
        // SAFETY: fcntl(2) on an fd we own, integer arguments only.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            check(flags)?;
            check(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK))?;
        }
        Ok(Pty { master, slave })
    }
}

/// The master of a pseudo-terminal, for tokio: its reading end, its writing end (the
/// command's stdin) and its resizer, which share the fd.
pub(crate) fn pty_streams(master: OwnedFd) -> io::Result<(PtyReader, PtyWriter, Resizer)> {
    // SAFETY: the File owns the fd; nothing closes or replaces it while the AsyncFd holds it.
    let master = Arc::new(unsafe { AsyncFd::register(File::from(master)) }?);
    Ok((
        PtyReader(Arc::clone(&master)),
        PtyWriter {
            master: Arc::clone(&master),
            ended: false,
        },
        Resizer(Resize::Pty(master)),
    ))
}

/// Sets the window size of the terminal `fd`, keeping a dimension given as 0.
fn set_size(fd: RawFd, cols: u16, rows: u16) -> io::Result<()> {
    if cols == 0 && rows == 0 {
        return Ok(());
    }
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into `size`, TIOCSWINSZ reads one; we own both.
    unsafe {
        check(libc::ioctl(fd, libc::TIOCGWINSZ, &mut size))?;
        if cols > 0 {
            size.ws_col = cols;
        }
        if rows > 0 {
            size.ws_row = rows;
        }
        check(libc::ioctl(fd, libc::TIOCSWINSZ, &size))?;
    }
    Ok(())
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// What the command writes to its terminal.
pub(crate) struct PtyReader(Arc<AsyncFd<File>>);

impl AsyncRead for PtyReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut ready = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match ready.try_io(|master| master.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                // Every holder of the slave side closed it: the end of the output.
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Poll::Ready(Ok(())),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// What the command reads from its terminal.
pub(crate) struct PtyWriter {
    master: Arc<AsyncFd<File>>,
    /// Whether `VEOF` was written (at the shutdown or the drop).
    ended: bool,
}

impl PtyWriter {
    /// Writes the terminal's `VEOF` character once, if the terminal reads lines (in raw mode
    /// it would be a plain character). Without waiting: a full input queue loses it.
    fn end_input(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let fd = self.master.get_ref().as_raw_fd();
        // SAFETY: tcgetattr(3) writes one termios into `termios`, which we own; on Linux the
        // master answers with the terminal's (the slave's) settings.
        let termios = unsafe {
            let mut termios = std::mem::zeroed::<libc::termios>();
            if libc::tcgetattr(fd, &mut termios) != 0 {
                return;
            }
            termios
        };
        if termios.c_lflag & libc::ICANON != 0 {
            let _ = self.master.get_ref().write(&[termios.c_cc[libc::VEOF]]);
        }
    }
}

impl AsyncWrite for PtyWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut ready = ready!(self.master.poll_write_ready(cx))?;
            match ready.try_io(|master| master.get_ref().write(data)) {
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.end_input();
        Poll::Ready(Ok(()))
    }
}

impl Drop for PtyWriter {
    fn drop(&mut self) {
        self.end_input();
    }
}

/// The program of a login shell: `/bin/bash -l` if there is a `/bin/bash`, else `/bin/sh -l`.
pub(crate) fn login_shell(has_bash: bool) -> Vec<String> {
    let shell = if has_bash { "/bin/bash" } else { "/bin/sh" };
    vec![shell.to_string(), "-l".to_string()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn an_execution_can_go_to_another_task() {
        fn send<T: Send>() {}
        fn shared<T: Send + Sync>() {}
        send::<Execution>();
        shared::<Resizer>();
    }

    #[test]
    fn an_argument_with_nul_is_refused() {
        let request = ExecRequest {
            command: vec!["echo".into(), "a\0b".into()],
            ..Default::default()
        };
        assert!(matches!(
            request.validate("s1"),
            Err(RuntimeError::InvalidSpec { .. })
        ));
    }

    #[test]
    fn a_login_shell_is_bash_where_there_is_one() {
        assert_eq!(login_shell(true), ["/bin/bash", "-l"]);
        assert_eq!(login_shell(false), ["/bin/sh", "-l"]);
    }

    fn size_of(fd: RawFd) -> (u16, u16) {
        let mut size = unsafe { std::mem::zeroed::<libc::winsize>() };
        // SAFETY: TIOCGWINSZ writes one winsize into `size`.
        assert_eq!(unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) }, 0);
        (size.ws_col, size.ws_row)
    }

    fn cloexec(fd: RawFd) -> bool {
        // SAFETY: F_GETFD on an fd we own.
        unsafe { libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0 }
    }

    #[test]
    fn a_pty_has_the_size_asked_and_its_fds_close_on_exec() {
        let pty = Pty::open(80, 24).unwrap();
        assert_eq!(size_of(pty.slave.as_raw_fd()), (80, 24));
        assert!(cloexec(pty.master.as_raw_fd()) && cloexec(pty.slave.as_raw_fd()));
        // A 0 keeps that dimension.
        set_size(pty.master.as_raw_fd(), 0, 50).unwrap();
        assert_eq!(size_of(pty.slave.as_raw_fd()), (80, 50));
    }

    #[tokio::test]
    async fn the_master_reads_what_the_slave_wrote_then_eof_once_it_closed() {
        let pty = Pty::open(0, 0).unwrap();
        let (mut reader, writer, _resizer) = pty_streams(pty.master).unwrap();
        let mut slave = File::from(pty.slave);
        slave.write_all(b"out").unwrap();
        drop(slave);
        let mut got = Vec::new();
        reader.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"out");
        drop(writer);
    }

    #[tokio::test]
    async fn dropping_the_writer_ends_a_line_reader_input() {
        let pty = Pty::open(0, 0).unwrap();
        let (_reader, mut writer, _resizer) = pty_streams(pty.master).unwrap();
        writer.write_all(b"line\n").await.unwrap();
        drop(writer);
        // The slave reads the line, then the end of its input.
        let mut slave = File::from(pty.slave);
        let mut got = String::new();
        slave.read_to_string(&mut got).unwrap();
        assert_eq!(got, "line\n");
    }
}
