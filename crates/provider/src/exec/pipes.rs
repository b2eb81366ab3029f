//! A plugin's standard streams, each served by a task of its own so that none blocks the
//! others: the request written (told apart when the plugin closes its input), standard output
//! kept up to [`STDOUT_LIMIT`], the end of standard error; a stream a process the plugin started
//! holds open given up after [`PIPE_GRACE`].

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::{PIPE_GRACE, STDERR_KEEP, STDOUT_LIMIT};

/// What was read of one of the plugin's output streams.
#[derive(Debug, Default)]
pub(super) struct Captured {
    pub(super) bytes: Vec<u8>,
    /// More was written than kept.
    pub(super) truncated: bool,
}

/// A task aborted when dropped: nothing of a call outlives it.
struct Task<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How the request went into the plugin's standard input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fed {
    /// All of it.
    Whole,
    /// The plugin closed its end (EPIPE) after `written` bytes.
    Closed { written: usize },
    /// Writing failed otherwise.
    Failed,
}

/// The plugin's standard streams, each served by a task so that none blocks the others.
pub(super) struct Pipes {
    stdin: Task<Fed>,
    stdout: Task<Captured>,
    stderr: Task<Captured>,
}

impl Pipes {
    pub(super) fn take(child: &mut tokio::process::Child, input: Vec<u8>) -> Option<Pipes> {
        let (mut stdin, stdout, stderr) = (
            child.stdin.take()?,
            child.stdout.take()?,
            child.stderr.take()?,
        );
        Some(Pipes {
            stdin: Task(tokio::spawn(async move {
                // A plugin may exit without reading all of it (EPIPE; SIGPIPE is ignored, as
                // in every daemon): its answer, if it gave one, counts.
                let mut written = 0;
                while written < input.len() {
                    match stdin.write(&input[written..]).await {
                        Ok(0) => return Fed::Closed { written },
                        Ok(n) => written += n,
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                            return Fed::Closed { written }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => return Fed::Failed,
                    }
                }
                Fed::Whole
            })),
            stdout: Task(tokio::spawn(read_capped(stdout, STDOUT_LIMIT, false))),
            stderr: Task(tokio::spawn(read_capped(stderr, STDERR_KEEP, true))),
        })
    }

    pub(super) async fn stdout(&mut self) -> Option<Captured> {
        closed(&mut self.stdout).await
    }

    /// How the request was written; `None` if the writing still blocks after [`PIPE_GRACE`]
    /// (a process the plugin started holds its standard input without reading).
    pub(super) async fn fed(&mut self) -> Option<Fed> {
        tokio::time::timeout(PIPE_GRACE, &mut self.stdin.0)
            .await
            .ok()?
            .ok()
    }

    pub(super) async fn stderr(&mut self) -> Option<Captured> {
        closed(&mut self.stderr).await
    }
}

/// What a stream held once closed; `None` if it is still open after [`PIPE_GRACE`].
async fn closed(task: &mut Task<Captured>) -> Option<Captured> {
    tokio::time::timeout(PIPE_GRACE, &mut task.0)
        .await
        .ok()?
        .ok()
}

/// Reads `reader` to its end, keeping at most `keep` bytes: the first ones, or with `tail` the
/// last ones. A read error ends the reading (what was read counts).
async fn read_capped<R: AsyncRead + Unpin>(mut reader: R, keep: usize, tail: bool) -> Captured {
    let mut captured = Captured::default();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if tail {
            captured.bytes.extend_from_slice(&chunk[..n]);
            if captured.bytes.len() > 2 * keep {
                let cut = captured.bytes.len() - keep;
                captured.bytes.drain(..cut);
                captured.truncated = true;
            }
        } else {
            let room = keep.saturating_sub(captured.bytes.len());
            captured.bytes.extend_from_slice(&chunk[..n.min(room)]);
            captured.truncated |= n > room;
        }
    }
    if tail && captured.bytes.len() > keep {
        let cut = captured.bytes.len() - keep;
        captured.bytes.drain(..cut);
        captured.truncated = true;
    }
    captured
}
