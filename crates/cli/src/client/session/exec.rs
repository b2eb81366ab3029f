//! `corral session exec` and `session shell`: a command in a running session, its standard
//! streams joined to this one's (on a terminal in raw mode with `-t`), over one WebSocket to
//! the manager that carries one stream of the session's tunnel.

use std::io::Write;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use corral_api::websocket::WebSocket;
use corral_tunnel::{Exec, Kind};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::mpsc;

use super::super::http::Api;
use super::terminal::{self, RawMode};
use super::wire::{chunk_buffer, incoming, message, read_chunk, Incoming, LOST};

/// The exit code when the connection is lost before the command's exit code came (as ssh's).
const LOST_CODE: i32 = 255;

/// Messages waiting for the socket: with 64 KiB chunks, at most this many of them are held.
const QUEUE: usize = 8;

/// How long the last messages (a final `Eof`) may take to leave once the command has ended.
const LINGER: Duration = Duration::from_secs(1);

/// `session exec`'s flags.
#[derive(Args)]
pub struct ExecArgs {
    /// The session's id; it must be running.
    id: String,
    /// Run the command on a terminal: this one goes to raw mode (Ctrl-C reaches the command)
    /// and its size follows this one's.
    #[arg(long, short)]
    tty: bool,
    /// Send standard input to the command (always on; accepted as kubectl spells it).
    #[arg(long = "stdin", short = 'i')]
    _stdin: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND", required = true)]
    command: Vec<String>,
}

/// `session exec`: runs the command; returns its exit code once the terminal is restored.
pub(super) async fn exec(api: &Api, args: ExecArgs) -> Result<i32> {
    run(api, &args.id, args.command, args.tty).await
}

/// `session shell`: `exec -t` without a command, which the agent takes for a login shell.
pub(super) async fn shell(api: &Api, id: &str) -> Result<i32> {
    run(api, id, Vec::new(), true).await
}

/// Runs `command` in the session and says how it ended (on standard error, after the terminal
/// is restored); its exit code.
async fn run(api: &Api, id: &str, command: Vec<String>, tty: bool) -> Result<i32> {
    let (cols, rows) = if tty {
        terminal::size().unwrap_or((0, 0))
    } else {
        (0, 0)
    };
    let open = Exec {
        command,
        tty,
        cols,
        rows,
    };
    let socket = api.websocket(&["sessions", id, "exec"]).await?;
    let raw = if tty { RawMode::enter()? } else { None };
    // In raw mode no key makes a signal here; one sent by another process ends the command's
    // connection with the terminal restored, as a shell reports it (128 + n).
    let stops = if raw.is_some() {
        // A reader of the output that goes away is then a failed write, after which the
        // terminal is restored, not a death by SIGPIPE that leaves it raw.
        // SAFETY: changes one signal's disposition; no handler runs.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        stop_signals()
    } else {
        Vec::new()
    };
    let (exit, close) = relay(socket, open, stops).await;
    drop(raw);
    let (code, why) = outcome(exit, close);
    if let Some(why) = why {
        // Not eprintln!, which panics when standard error is closed.
        let _ = writeln!(std::io::stderr(), "corral: {why}");
    }
    Ok(code)
}

/// The CLI's exit code, and what to say, from what the manager sent: the command's exit code
/// when it came; else 0 for a normal end, 1 for an end with a reason, 255 for a lost connection.
pub(super) fn outcome(exit: Option<i32>, close: Option<String>) -> (i32, Option<String>) {
    let reason = close.as_ref().map(|r| (!r.is_empty()).then(|| r.clone()));
    match (exit, reason) {
        (Some(code), reason) => (code, reason.flatten()),
        (None, Some(None)) => (0, None),
        (None, Some(Some(reason))) => (1, Some(reason)),
        (None, None) => (LOST_CODE, Some(LOST.to_string())),
    }
}

/// Joins the socket to this process's standard streams until the manager closes the stream
/// (or the socket ends, or a stop signal comes): one task sends standard input, one the
/// terminal's new sizes, one writes both to the socket in order; this one writes what comes.
/// What came: the command's exit code, and the close's reason.
async fn relay(
    socket: WebSocket,
    open: Exec,
    mut stops: Vec<(i32, Signal)>,
) -> (Option<i32>, Option<String>) {
    let tty = open.tty;
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = mpsc::channel::<Kind>(QUEUE);
    let first = Kind::Open(serde_json::to_vec(&open).expect("serialisable").into());
    let _ = tx.send(first).await;
    // The socket stays open once the input ended (a WebSocket has no half-close: closing it
    // would end the command's output too); it is closed once the command's end came.
    let writer = tokio::spawn(async move {
        while let Some(kind) = rx.recv().await {
            if sink.send(message(&kind)).await.is_err() {
                return None;
            }
        }
        Some(sink)
    });
    let input = tokio::spawn(send_stdin(tx.clone()));
    let resize = tty.then(|| tokio::spawn(follow_size(tx.clone())));
    drop(tx);
    let ended = tokio::select! {
        ended = receive(&mut stream) => ended,
        signal = stopped(&mut stops) => (Some(128 + signal), None),
    };
    input.abort();
    if let Some(resize) = resize {
        resize.abort();
    }
    if let Ok(Ok(Some(mut sink))) = tokio::time::timeout(LINGER, writer).await {
        let _ = sink.close().await;
    }
    ended
}

/// Reads what the manager sends: output to standard output, errors to standard error, until
/// the stream's close or the socket's end. The exit code and the close's reason.
async fn receive<S, E>(stream: &mut S) -> (Option<i32>, Option<String>)
where
    S: futures_util::Stream<Item = Result<corral_api::websocket::Message, E>> + Unpin,
{
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    let mut exit = None;
    loop {
        let written = match incoming(stream.next().await) {
            Incoming::Kind(Kind::Data(bytes)) => write(&mut stdout, &bytes).await,
            Incoming::Kind(Kind::Stderr(bytes)) => write(&mut stderr, &bytes).await,
            Incoming::Kind(Kind::Exit(code)) => {
                exit = Some(code);
                Ok(())
            }
            Incoming::Kind(Kind::Close(reason)) => return (exit, Some(reason)),
            Incoming::End => return (exit, None),
            Incoming::Kind(_) | Incoming::Skip => Ok(()),
        };
        if let Err(e) = written {
            return (exit, Some(format!("writing the command's output: {e}")));
        }
    }
}

/// Writes one chunk at once (a terminal shows it as it comes).
async fn write(out: &mut (impl AsyncWrite + Unpin), bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(bytes).await?;
    out.flush().await
}

/// Sends standard input, one chunk at a time, then its end.
async fn send_stdin(tx: mpsc::Sender<Kind>) {
    let mut stdin = tokio::io::stdin();
    let mut buf = chunk_buffer();
    loop {
        let kind = read_chunk(&mut stdin, &mut buf, "standard input").await;
        let last = !matches!(kind, Kind::Data(_));
        if tx.send(kind).await.is_err() || last {
            return;
        }
    }
}

/// Sends the terminal's size each time it changes (SIGWINCH).
async fn follow_size(tx: mpsc::Sender<Kind>) {
    let Ok(mut changes) = signal(SignalKind::window_change()) else {
        return;
    };
    let mut last = terminal::size();
    while changes.recv().await.is_some() {
        let now = terminal::size();
        if now == last {
            continue;
        }
        last = now;
        if let Some((cols, rows)) = now {
            if tx.send(Kind::Resize { cols, rows }).await.is_err() {
                return;
            }
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught (those that can be) while the terminal is raw.
fn stop_signals() -> Vec<(i32, Signal)> {
    [
        (libc::SIGINT, SignalKind::interrupt()),
        (libc::SIGTERM, SignalKind::terminate()),
        (libc::SIGHUP, SignalKind::hangup()),
    ]
    .into_iter()
    .filter_map(|(n, kind)| Some((n, signal(kind).ok()?)))
    .collect()
}

/// The first of `signals` to come; never, without any.
async fn stopped(signals: &mut [(i32, Signal)]) -> i32 {
    if signals.is_empty() {
        return std::future::pending().await;
    }
    let waits = signals.iter_mut().map(|(n, s)| {
        Box::pin(async move {
            s.recv().await;
            *n
        })
    });
    futures_util::future::select_all(waits).await.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_is_the_commands_when_it_came() {
        assert_eq!(outcome(Some(3), Some(String::new())), (3, None));
        assert_eq!(
            outcome(Some(0), None),
            (0, None),
            "exit, then the socket ended"
        );
        assert_eq!(
            outcome(Some(2), Some("agent a1 was lost".into())),
            (2, Some("agent a1 was lost".into())),
            "a reason after the exit code is said, the code kept"
        );
    }

    #[test]
    fn without_an_exit_code_a_reason_is_an_error_and_silence_a_lost_connection() {
        assert_eq!(outcome(None, Some(String::new())), (0, None));
        assert_eq!(
            outcome(None, Some("session s1 is not running".into())),
            (1, Some("session s1 is not running".into()))
        );
        assert_eq!(
            outcome(None, None),
            (255, Some("the connection to the session was lost".into()))
        );
    }

    #[tokio::test]
    async fn output_and_exit_code_come_until_the_close() {
        let frames = [
            Kind::Exit(4),
            Kind::Close(String::new()),
            Kind::Data(b"never read".to_vec().into()),
        ];
        let mut stream = futures_util::stream::iter(frames.iter().map(|k| Ok::<_, ()>(message(k))));
        assert_eq!(receive(&mut stream).await, (Some(4), Some(String::new())));
        let mut cut = futures_util::stream::iter([Ok::<_, ()>(message(&Kind::Exit(1)))]);
        assert_eq!(receive(&mut cut).await, (Some(1), None));
    }
}
