//! The agent's end of its tunnel: a WebSocket dialled out to the manager once the agent has
//! joined, and again whenever it is lost (with backoff), so that an agent behind NAT or on a
//! batch cluster's private network serves terminals and apps as well as any. Each stream the
//! manager opens is checked (the session must run on this agent) and served: a TCP port the
//! session listens on, or a command run in the session.

use std::sync::Arc;

use bytes::Bytes;
use corral_api::websocket::{Message, WebSocket};
use corral_runtime::{ExecRequest, Execution, Exit, Runtime};
use corral_tunnel::{Accepted, Exec, Keepalive, Kind, Side, Stream, StreamWriter, Target, Tunnel};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::backoff::{backoff, FIRST_RETRY_WAIT, MAX_JOIN_RETRY_WAIT};
use crate::{lock, sessions, Agent};

/// What one read of a session's output or port sends at most.
const CHUNK: usize = 32 << 10;

/// Holds the agent's tunnel open for as long as the agent runs.
pub(crate) async fn hold(agent: Arc<Agent>) {
    let mut waits = backoff(FIRST_RETRY_WAIT, MAX_JOIN_RETRY_WAIT);
    loop {
        let path = ["agents", agent.config.id.as_str(), "tunnel"];
        match agent.as_agent().websocket(&path, &[]).await {
            Ok(socket) => {
                waits = backoff(FIRST_RETRY_WAIT, MAX_JOIN_RETRY_WAIT);
                tracing::info!("the tunnel to the manager is open");
                serve(&agent, socket).await;
                tracing::warn!("the tunnel to the manager was lost; opening it again");
            }
            Err(e) => tracing::warn!(error = %e, "could not open the tunnel to the manager"),
        }
        let wait = waits.next().expect("backoff never ends");
        tokio::time::sleep(wait).await;
    }
}

/// Serves the streams of one tunnel connection until it ends.
async fn serve(agent: &Arc<Agent>, socket: WebSocket) {
    let (sink, stream) = socket.split();
    let incoming = Box::pin(
        stream
            .take_while(|m| std::future::ready(!matches!(m, Ok(Message::Close(_)))))
            .filter_map(|m| {
                std::future::ready(match m {
                    Ok(Message::Binary(b)) => Some(Ok(b)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e.to_string())),
                })
            }),
    );
    let outgoing = Box::pin(sink.with(|b: Bytes| {
        std::future::ready(Ok::<_, corral_api::websocket::Error>(Message::Binary(b)))
    }));
    let (tunnel, mut accepted) =
        Tunnel::start(incoming, outgoing, Side::Acceptor, Keepalive::from_env());
    while let Some(stream) = accepted.recv().await {
        tokio::spawn(serve_stream(agent.clone(), stream));
    }
    tunnel.closed().await;
}

async fn serve_stream(agent: Arc<Agent>, Accepted { open, stream }: Accepted) {
    let assignment = lock(&agent.running).get(&open.session).cloned();
    let Some(assignment) = assignment else {
        return stream.close(&format!(
            "session {} does not run on this agent",
            open.session
        ));
    };
    match open.target {
        Target::Tcp { port } => {
            let host = match address(&agent.runtime, &open.session).await {
                Ok(host) => host,
                Err(why) => return stream.close(&why),
            };
            match TcpStream::connect((host, port)).await {
                Ok(tcp) => pump_tcp(stream, tcp).await,
                Err(e) => stream.close(&format!(
                    "nothing answers on port {port} in session {} ({e})",
                    open.session
                )),
            }
        }
        Target::Exec(exec) => {
            let spec = sessions::spec_of(&assignment, &agent.config.group);
            match agent
                .runtime
                .exec(&spec, &agent.config.work_root, &request(exec))
                .await
            {
                Ok(execution) => pump_exec(stream, execution).await,
                Err(e) => stream.close(&e.to_string()),
            }
        }
    }
}

fn request(exec: Exec) -> ExecRequest {
    ExecRequest {
        command: exec.command,
        tty: exec.tty,
        cols: exec.cols,
        rows: exec.rows,
    }
}

/// Where the session's ports are, as seen from the agent.
async fn address(runtime: &Runtime, session: &str) -> Result<std::net::IpAddr, String> {
    runtime
        .address(session)
        .await
        .map_err(|e| format!("session {session}'s address: {e}"))
}

/// Carries a TCP connection both ways (see [`corral_tunnel::bridge`]).
async fn pump_tcp(stream: Stream, tcp: TcpStream) {
    let _ = tcp.set_nodelay(true);
    let _ = corral_tunnel::bridge(stream, tcp).await;
}

/// Reads `from` to its end as frames made by `make`; the error says why reading failed.
async fn send_all(
    from: &mut (impl AsyncRead + Unpin),
    to: &StreamWriter,
    make: fn(Bytes) -> Kind,
) -> Result<(), String> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = from
            .read(&mut buf)
            .await
            .map_err(|e| format!("reading: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        if to
            .send(make(Bytes::copy_from_slice(&buf[..n])))
            .await
            .is_err()
        {
            return Ok(());
        }
    }
}

/// Carries a command's stdin, terminal size, stdout, stderr and exit code. The user going
/// away ends the command (its stdin closes, its terminal hangs up).
async fn pump_exec(stream: Stream, execution: Execution) {
    let Execution {
        stdin,
        mut stdout,
        stderr,
        resizer,
        exit,
    } = execution;
    let (mut from_user, to_user) = stream.split();
    let input = async {
        let mut stdin = Some(stdin);
        while let Some(kind) = from_user.recv().await {
            match kind {
                Kind::Data(bytes) => {
                    if let Some(pipe) = &mut stdin {
                        if pipe.write_all(&bytes).await.is_err() || pipe.flush().await.is_err() {
                            stdin = None;
                        }
                    }
                }
                Kind::Eof => {
                    if let Some(mut pipe) = stdin.take() {
                        let _ = pipe.shutdown().await;
                    }
                }
                Kind::Resize { cols, rows } => {
                    if let Err(e) = resizer.resize(cols, rows).await {
                        tracing::info!(error = %e, "a terminal was not resized");
                    }
                }
                Kind::Close(_) => return,
                _ => {}
            }
        }
    };
    let output = async {
        let err = async {
            match stderr {
                Some(mut stderr) => send_all(&mut stderr, &to_user, Kind::Stderr).await,
                None => Ok(()),
            }
        };
        let (out, err) = tokio::join!(send_all(&mut stdout, &to_user, Kind::Data), err);
        let outcome = match exit.await {
            Exit::Code(code) => Ok(code),
            Exit::Signal(signal) => Ok(128 + signal),
            Exit::Failed(why) => Err(why),
        };
        match (outcome, out.and(err)) {
            (Ok(code), _) => {
                let _ = to_user.send(Kind::Exit(code)).await;
                to_user.close("");
            }
            (Err(why), _) => to_user.close(&why),
        }
    };
    tokio::select! {
        () = output => {}
        () = input => {}
    }
}
