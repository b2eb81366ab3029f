//! `corral session port-forward`: a local port whose every connection reaches a port in a
//! running session, each over its own WebSocket to the manager (one stream of the session's
//! tunnel), bytes and half-closes carried both ways.

use std::io::Write;

use anyhow::{bail, Context, Result};
use clap::Args;
use corral_api::websocket::{Message, WebSocket};
use corral_tunnel::Kind;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use super::super::http::{parse, refusal, Api};
use super::wire::{chunk_buffer, incoming, message, read_chunk, Incoming, LOST};
use corral_api::apps::AppView;

/// `session port-forward`'s flags.
#[derive(Args)]
pub struct ForwardArgs {
    /// The session's id; it must be running.
    id: String,
    /// The session's port, or one of its apps by name (`session apps`), reached here on the
    /// same number (REMOTE) or on LOCAL (LOCAL:REMOTE); LOCAL 0, or empty, picks a free port.
    #[arg(value_name = "[LOCAL:]REMOTE", value_parser = parse_ports)]
    ports: Ports,
    /// The local address to listen on.
    #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1")]
    address: String,
}

/// The ports of `[LOCAL:]REMOTE`; no LOCAL is the remote port's number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ports {
    pub local: Option<u16>,
    pub remote: Remote,
}

/// The session's side: a port, or an app by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remote {
    Port(u16),
    App(String),
}

/// Reads `[LOCAL:]REMOTE`: REMOTE 1 to 65535 or an app's name; LOCAL 0 to 65535, 0 or empty
/// for a free one.
pub(super) fn parse_ports(spec: &str) -> Result<Ports, String> {
    let (local, remote) = match spec.split_once(':') {
        Some((local, remote)) => (Some(local), remote),
        None => (None, spec),
    };
    let remote = if remote.starts_with(|c: char| c.is_ascii_alphabetic()) {
        corral_api::apps::check_name(remote).map_err(|e| e.to_string())?;
        Remote::App(remote.to_string())
    } else {
        match port(remote)? {
            0 => return Err("the session's port must be 1 to 65535, not 0".into()),
            p => Remote::Port(p),
        }
    };
    let local = match local {
        Some("") => Some(0),
        Some(local) => Some(port(local)?),
        None => None,
    };
    Ok(Ports { local, remote })
}

/// The port of the session's app `name`.
async fn app_port(api: &Api, id: &str, name: &str) -> Result<u16> {
    let apps: Vec<AppView> = parse(&api.get(&["sessions", id, "apps"], &[]).await?)?;
    if let Some(app) = apps.iter().find(|a| a.name == name) {
        return Ok(app.app.port);
    }
    let names: Vec<&str> = apps.iter().map(|a| a.name.as_str()).collect();
    bail!(
        "session {id} serves no app {name:?} (its apps: {})",
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    )
}

/// A port number, 0 to 65535.
fn port(text: &str) -> Result<u16, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not a port"));
    }
    text.parse()
        .map_err(|_| format!("{text:?} is not a port (at most 65535)"))
}

/// `session port-forward`: checks that the session takes connections (one WebSocket opened
/// and closed: a session not running fails here, in the manager's words), listens, says where,
/// and forwards every connection until Ctrl-C or SIGTERM, or until the manager refuses one
/// for good (the session ended).
pub(super) async fn port_forward(api: &Api, args: ForwardArgs) -> Result<()> {
    let remote = match &args.ports.remote {
        Remote::Port(port) => *port,
        Remote::App(name) => app_port(api, &args.id, name).await?,
    };
    let local_port = args.ports.local.unwrap_or(remote);
    let remote = remote.to_string();
    let path = vec![
        "sessions".to_string(),
        args.id.clone(),
        "forward".to_string(),
        remote.clone(),
    ];
    let mut probe = api.websocket(&refs(&path)).await?;
    let _ = probe.close(None).await;
    drop(probe);
    let listener = TcpListener::bind((args.address.as_str(), local_port))
        .await
        .with_context(|| format!("listening on {}:{local_port}", args.address))?;
    let local = listener.local_addr()?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "Forwarding from {local} -> {remote}")?;
    stdout.flush()?;
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for Ctrl-C")?;
    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let (fatal_tx, mut fatal) = mpsc::channel::<anyhow::Error>(1);
    let mut count = 0u64;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((conn, _)) => {
                    count += 1;
                    let _ = conn.set_nodelay(true);
                    let api = api.clone();
                    let (path, fatal) = (path.clone(), fatal_tx.clone());
                    tokio::spawn(forward(api, path, count, conn, fatal));
                }
                Err(e) => say(0, &format!("accepting a connection: {e}")),
            },
            Some(e) = fatal.recv() => return Err(e),
            _ = interrupt.recv() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
        }
    }
}

/// Borrowed path segments, as the client takes them.
fn refs(path: &[String]) -> Vec<&str> {
    path.iter().map(String::as_str).collect()
}

/// One line on standard error about connection `n` (0: the listener).
fn say(n: u64, what: &str) {
    let who = if n == 0 {
        String::new()
    } else {
        format!("connection {n}: ")
    };
    // Not eprintln!, which panics when standard error is closed.
    let _ = writeln!(std::io::stderr(), "corral: {who}{what}");
}

/// Forwards connection `n` over a WebSocket of its own: this task writes what comes to the
/// local connection, another sends what it reads. A refusal that will not change (a 4xx other
/// than 429: the session ended, or is not the user's) ends the whole command through `fatal`.
async fn forward(
    api: Api,
    path: Vec<String>,
    n: u64,
    conn: TcpStream,
    fatal: mpsc::Sender<anyhow::Error>,
) {
    let socket: WebSocket = match api.websocket(&refs(&path)).await {
        Ok(socket) => socket,
        Err(e) => {
            let status = refusal(&e).unwrap_or(0);
            if (400..500).contains(&status) && status != 429 {
                let _ = fatal.send(e).await;
            } else {
                say(n, &format!("{e:#}"));
            }
            return;
        }
    };
    let (read, write) = conn.into_split();
    let (sink, mut stream) = socket.split();
    let upload = tokio::spawn(send_local(read, sink));
    let why = receive(&mut stream, write).await;
    upload.abort();
    if let Some(why) = why {
        say(n, &why);
    }
}

/// Sends what the local connection sends, one chunk at a time, then its end (`Eof`, or `Close`
/// with why a read failed).
async fn send_local<S>(mut read: tokio::net::tcp::OwnedReadHalf, mut sink: S)
where
    S: Sink<Message> + Unpin,
{
    let mut buf = chunk_buffer();
    loop {
        let kind = read_chunk(&mut read, &mut buf, "the local connection").await;
        let last = !matches!(kind, Kind::Data(_));
        if sink.send(message(&kind)).await.is_err() || last {
            return;
        }
    }
}

/// Writes what comes to the local connection, shuts its writing side at `Eof`, and returns at
/// the close (with its reason, if any) or at the socket's end (then the connection was lost).
/// A local connection that no longer takes bytes ends it quietly: its reader went away.
async fn receive<S, E, W>(stream: &mut S, mut write: W) -> Option<String>
where
    S: Stream<Item = Result<Message, E>> + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    loop {
        match incoming(stream.next().await) {
            Incoming::Kind(Kind::Data(bytes)) => {
                if write.write_all(&bytes).await.is_err() {
                    return None;
                }
            }
            Incoming::Kind(Kind::Eof) => {
                let _ = write.shutdown().await;
            }
            Incoming::Kind(Kind::Close(reason)) => return (!reason.is_empty()).then_some(reason),
            Incoming::End => return Some(LOST.to_string()),
            Incoming::Kind(_) | Incoming::Skip => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_remote_or_local_colon_remote() {
        let ports = |local, remote| {
            Ok(Ports {
                local,
                remote: Remote::Port(remote),
            })
        };
        assert_eq!(parse_ports("8888"), ports(None, 8888));
        assert_eq!(parse_ports("18888:8888"), ports(Some(18888), 8888));
        assert_eq!(
            parse_ports("0:8888"),
            ports(Some(0), 8888),
            "0 picks a free port"
        );
        assert_eq!(parse_ports(":8888"), ports(Some(0), 8888));
        assert_eq!(parse_ports("65535"), ports(None, 65535));
        let app = |local| {
            Ok(Ports {
                local,
                remote: Remote::App("jupyter".into()),
            })
        };
        assert_eq!(parse_ports("jupyter"), app(None));
        assert_eq!(parse_ports("0:jupyter"), app(Some(0)));
        assert!(parse_ports("Jupyter")
            .unwrap_err()
            .contains("not an app name"));
    }

    #[test]
    fn a_bad_port_is_named() {
        let err = |spec: &str| parse_ports(spec).unwrap_err();
        assert_eq!(err("8888x"), r#""8888x" is not a port"#);
        assert_eq!(err("x:8888"), r#""x" is not a port"#);
        assert_eq!(err("8888:"), r#""" is not a port"#);
        assert_eq!(err(""), r#""" is not a port"#);
        assert_eq!(err("-1"), r#""-1" is not a port"#);
        assert_eq!(err("1:2:3"), r#""2:3" is not a port"#);
        assert_eq!(err("70000"), r#""70000" is not a port (at most 65535)"#);
        assert_eq!(err("70000:80"), r#""70000" is not a port (at most 65535)"#);
        assert_eq!(err("0"), "the session's port must be 1 to 65535, not 0");
        assert_eq!(err("80:0"), "the session's port must be 1 to 65535, not 0");
    }

    #[tokio::test]
    async fn bytes_then_eof_then_close_reach_the_local_connection() {
        let frames = [
            Kind::Data(b"hello ".to_vec().into()),
            Kind::Data(b"world".to_vec().into()),
            Kind::Eof,
            Kind::Close("nothing listens on port 8888 in session s1".into()),
        ];
        let mut stream = futures_util::stream::iter(frames.iter().map(|k| Ok::<_, ()>(message(k))));
        let (mine, mut theirs) = tokio::io::duplex(1024);
        let why = receive(&mut stream, mine).await;
        assert_eq!(
            why.as_deref(),
            Some("nothing listens on port 8888 in session s1")
        );
        let mut got = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut theirs, &mut got)
            .await
            .unwrap();
        assert_eq!(got, "hello world");
    }

    #[tokio::test]
    async fn a_socket_that_ends_without_a_close_is_a_lost_connection() {
        let mut stream =
            futures_util::stream::iter([Ok::<_, ()>(message(&Kind::Close("".into())))]);
        assert_eq!(receive(&mut stream, tokio::io::sink()).await, None);
        let mut cut = futures_util::stream::iter(Vec::<Result<Message, ()>>::new());
        assert_eq!(
            receive(&mut cut, tokio::io::sink()).await.as_deref(),
            Some(LOST)
        );
    }
}
