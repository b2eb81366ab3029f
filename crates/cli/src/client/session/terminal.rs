//! The local terminal of `session exec -t` and `session shell`: raw mode while the remote
//! command owns it (restored on every way out, a panic's included), and its size.

use std::io::IsTerminal;

use anyhow::{Context, Result};

/// Standard input's terminal in raw mode until this is dropped: every key, Ctrl-C and Ctrl-Z
/// included, is a byte for the remote terminal, and nothing is echoed here.
pub(super) struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    /// Raw mode on standard input if it is a terminal; `None`, and nothing touched, if not.
    pub(super) fn enter() -> Result<Option<RawMode>> {
        if !std::io::stdin().is_terminal() {
            return Ok(None);
        }
        // SAFETY: termios is plain data, filled by tcgetattr before it is read.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: fd 0 is open (a terminal, checked above); the pointers are to live values.
        unsafe {
            if libc::tcgetattr(libc::STDIN_FILENO, &mut saved) != 0 {
                return Err(std::io::Error::last_os_error()).context("reading the terminal's mode");
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            if libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw) != 0 {
                return Err(std::io::Error::last_os_error())
                    .context("putting the terminal in raw mode");
            }
        }
        Ok(Some(RawMode { saved }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the settings read from the same descriptor in `enter`.
        unsafe {
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &self.saved);
        }
    }
}

/// The terminal's size as (columns, rows), from standard output or else standard input;
/// `None` when neither is a terminal (or it says 0 columns).
pub(super) fn size() -> Option<(u16, u16)> {
    [libc::STDOUT_FILENO, libc::STDIN_FILENO]
        .into_iter()
        .find_map(|fd| {
            // SAFETY: winsize is plain data, written by the ioctl before it is read.
            let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
            // SAFETY: TIOCGWINSZ writes one winsize through the pointer, or fails.
            let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0;
            (ok && ws.ws_col > 0).then_some((ws.ws_col, ws.ws_row))
        })
}
