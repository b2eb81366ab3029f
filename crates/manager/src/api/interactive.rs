//! Reaching into a running session: a command or a terminal (`exec`), a forwarded TCP port
//! (`forward`), and the tunnels agents dial out for them (`agents/{id}/tunnel`). Every byte
//! travels over the session's agent's tunnel; the user's WebSocket carries the tunnel's
//! frames without their stream id (`corral_tunnel::frame`). Only the session's owner and
//! admins get in, and each exec and forward is an event (who, which session; never what was
//! typed).

use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use corral_core::SessionState;
use corral_store::{NewEvent, Role};
use corral_tunnel::{Exec, Keepalive, Kind, Open, Side, Stream, Target, Tunnel};
use futures_util::{SinkExt, StreamExt};

#[cfg(feature = "openapi")]
use super::openapi::ErrorResponse;
use super::Result;
use crate::api::sessions::{own_session, Spec};
use crate::auth::{AgentCaller, Caller};
use crate::error::ApiError;
use crate::{now, App};
use corral_api::apps::Apps;

/// How long a user has to send the command after the WebSocket opened.
const OPEN_WITHIN: Duration = Duration::from_secs(30);
/// How long a user has to answer the close of a command's connection.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);
/// The largest message a user's or an agent's WebSocket may send.
const MAX_MESSAGE: usize = 1 << 20;

fn upgrade(
    upgrade: std::result::Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<WebSocketUpgrade> {
    upgrade
        .map(|u| u.max_message_size(MAX_MESSAGE).max_frame_size(MAX_MESSAGE))
        .map_err(|e| {
            ApiError::bad_request(format!(
                "this route is a WebSocket (Connection: Upgrade, Upgrade: websocket): {e}"
            ))
        })
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/agents/{id}/tunnel",
    summary = "The agent's tunnel (a WebSocket the agent dials out; terminals, apps and forwarded ports of its sessions travel over it); the agent's own token only",
    params(("id" = String, Path, description = "the agent")),
    responses(
        (status = 101, description = "the tunnel is open"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(crate) async fn agent_tunnel(
    State(app): State<App>,
    AgentCaller(caller): AgentCaller,
    Path(id): Path<String>,
    ws: std::result::Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response> {
    // Its own token only: whoever holds the tunnel sees the streams of the agent's sessions.
    if caller.role != Role::Agent || caller.user != id {
        return Err(ApiError::forbidden(format!(
            "only agent {id:?}'s own token opens its tunnel"
        )));
    }
    if app.store.get_agent(&id).await?.is_none() {
        return Err(ApiError::not_found("agent", &id));
    }
    let ws = upgrade(ws)?;
    Ok(ws.on_upgrade(move |socket| async move {
        let (incoming, outgoing) = binary(socket);
        let (tunnel, _) = Tunnel::start(incoming, outgoing, Side::Opener, Keepalive::from_env());
        app.tunnels.hold(&id, tunnel).await;
    }))
}

/// A WebSocket as the tunnel's transport: its binary messages, until a close.
fn binary(
    socket: WebSocket,
) -> (
    impl futures_util::Stream<Item = std::result::Result<Bytes, String>> + Send + Unpin,
    impl futures_util::Sink<Bytes> + Send + Unpin,
) {
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
    let outgoing = Box::pin(
        sink.with(|b: Bytes| std::future::ready(Ok::<_, axum::Error>(Message::Binary(b)))),
    );
    (incoming, outgoing)
}

/// A running session within reach: its owner, group, agent and apps, and the agent's tunnel.
pub(super) struct Reached {
    pub id: String,
    pub owner: String,
    pub group: String,
    pub agent: String,
    pub apps: Apps,
    pub tunnel: Tunnel,
}

/// The running session's agent's tunnel, for its owner or an admin.
pub(super) async fn reach(app: &App, caller: &Caller, id: &str) -> Result<Reached> {
    let record = own_session(app, caller, id).await?;
    let session = &record.session;
    let conflict = |message: String| ApiError::new(StatusCode::CONFLICT, "conflict", message);
    if session.state != SessionState::Running {
        return Err(conflict(format!(
            "session {id} is {}: only a running session can be reached",
            serde_json::to_value(session.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        )));
    }
    let Some(agent) = &session.agent else {
        return Err(conflict(format!(
            "session {id} runs as a job of its group's batch system (the --sessions binding): \
             terminals, apps and forwarded ports need a session on an agent"
        )));
    };
    // Passing: the agent dials again within seconds (after its or this manager's restart).
    let tunnel = app.tunnels.get(&agent.0).ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!(
                "agent {} holds no tunnel to this manager (it is reconnecting, or older than this \
             manager); try again in a moment",
                agent.0
            ),
        )
    })?;
    let spec: Spec = serde_json::from_value(record.spec.clone()).unwrap_or_default();
    Ok(Reached {
        id: id.to_string(),
        owner: session.owner.clone(),
        group: session.group.clone(),
        apps: spec.apps,
        agent: agent.0.clone(),
        tunnel,
    })
}

/// Opens `target` on the session's agent's tunnel, records who did (`kind`, `what`), then
/// relays the user's socket to it until either ends.
async fn attach(
    app: &App,
    caller: &Caller,
    to: Reached,
    socket: WebSocket,
    target: Target,
    (kind, what): (&str, String),
) {
    let open = Open {
        session: to.id.clone(),
        target,
    };
    let Ok(stream) = to.tunnel.open(&open) else {
        return close(socket, "the agent's tunnel closed").await;
    };
    let event = NewEvent {
        at: now(),
        group: Some(to.group),
        session: Some(to.id.clone()),
        agent: Some(to.agent),
        kind: kind.to_string(),
        message: format!("{} {what}", caller.user),
    };
    if let Err(e) = app.store.record_event(&event).await {
        tracing::warn!(session = to.id, error = %e, "could not record the event");
    }
    relay(app, &to.id, socket, stream).await;
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/sessions/{id}/exec",
    summary = "Run a command or a terminal in a running session (a WebSocket: the first message opens it with the command, then stdin, resizes, stdout, stderr and the exit code as frames); its owner or an admin",
    params(("id" = String, Path, description = "the session")),
    responses(
        (status = 101, description = "the command runs"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
    )
)
)]
pub(crate) async fn exec(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
    ws: std::result::Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response> {
    let reached = reach(&app, &caller, &id).await?;
    let ws = upgrade(ws)?;
    Ok(ws.on_upgrade(move |mut socket| async move {
        let exec = match first_open(&mut socket).await {
            Ok(exec) => exec,
            Err(why) => return close(socket, &why).await,
        };
        let what = match exec.command.first() {
            None => "opened a shell".to_string(),
            Some(program) if exec.tty => format!("ran {program:?} on a terminal"),
            Some(program) => format!("ran {program:?}"),
        };
        let event = ("session.exec", what);
        attach(&app, &caller, reached, socket, Target::Exec(exec), event).await;
    }))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/sessions/{id}/forward/{port}",
    summary = "Forward a TCP connection to a port the running session listens on (a WebSocket of data frames); its owner or an admin",
    params(
        ("id" = String, Path, description = "the session"),
        ("port" = u16, Path, minimum = 1, description = "the port in the session (1 to 65535)"),
    ),
    responses(
        (status = 101, description = "connected"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
    )
)
)]
pub(crate) async fn forward(
    State(app): State<App>,
    caller: Caller,
    Path((id, port)): Path<(String, String)>,
    ws: std::result::Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response> {
    let port =
        port.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
            ApiError::invalid("port", format!("{port:?} is not a port (1 to 65535)"))
        })?;
    let reached = reach(&app, &caller, &id).await?;
    let ws = upgrade(ws)?;
    Ok(ws.on_upgrade(move |socket| async move {
        let event = ("session.forward", format!("forwarded port {port}"));
        attach(&app, &caller, reached, socket, Target::Tcp { port }, event).await;
    }))
}

/// The user's first message: an `open` frame with the command.
async fn first_open(socket: &mut WebSocket) -> std::result::Result<Exec, String> {
    let message = tokio::time::timeout(OPEN_WITHIN, async {
        loop {
            match socket.recv().await {
                Some(Ok(Message::Binary(b))) => return Some(b),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                _ => return None,
            }
        }
    })
    .await
    .map_err(|_| format!("no open frame within {} s", OPEN_WITHIN.as_secs()))?
    .ok_or("the connection ended before its open frame")?;
    match Kind::decode(message) {
        Ok(Kind::Open(json)) => {
            let exec: Exec =
                serde_json::from_slice(&json).map_err(|e| format!("a bad open frame: {e}"))?;
            if exec.command.iter().any(|a| a.contains('\0')) {
                return Err("a bad open frame: the command contains NUL".into());
            }
            Ok(exec)
        }
        Ok(other) => Err(format!(
            "the first frame must be open, not {}",
            other.name()
        )),
        Err(e) => Err(format!("a bad frame: {e}")),
    }
}

/// Ends a user's WebSocket with a close frame saying why.
async fn close(mut socket: WebSocket, why: &str) {
    let _ = socket
        .send(Message::Binary(Kind::Close(why.to_string()).encode()))
        .await;
    let _ = socket.close().await;
}

/// Carries frames between the user's WebSocket and the tunnel's stream until either ends;
/// the user's traffic counts as the session's use (its group's idle termination).
async fn relay(app: &App, id: &str, socket: WebSocket, stream: Stream) {
    let (mut to_user, mut from_user) = socket.split();
    let (mut from_agent, to_agent) = stream.split();
    let upstream = async {
        while let Some(message) = from_user.next().await {
            let bytes = match message {
                Ok(Message::Binary(b)) => b,
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            };
            app.activity.touch(&app.store, id);
            match Kind::decode(bytes) {
                Ok(kind @ (Kind::Data(_) | Kind::Eof | Kind::Resize { .. } | Kind::Close(_))) => {
                    if to_agent.send(kind).await.is_err() {
                        return;
                    }
                }
                Ok(other) => {
                    return to_agent.close(&format!("a user may not send {} frames", other.name()))
                }
                Err(e) => return to_agent.close(&format!("a bad frame from the user: {e}")),
            }
        }
        to_agent.close("");
    };
    let downstream = async {
        let mut ping = tokio::time::interval(Keepalive::from_env().ping_every);
        loop {
            let kind = tokio::select! {
                kind = from_agent.recv() => kind,
                _ = ping.tick() => {
                    if to_user.send(Message::Ping(Bytes::new())).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let Some(kind) = kind else {
                // The agent's side is gone without a word: the connection is lost (no close
                // frame of the stream, which would say the command ended), and why is in the
                // WebSocket's close.
                let _ = to_user
                    .send(Message::Close(Some(CloseFrame {
                        code: close_code::ERROR,
                        reason: "the agent's tunnel was lost".into(),
                    })))
                    .await;
                return;
            };
            let last = matches!(kind, Kind::Close(_));
            if matches!(kind, Kind::Data(_) | Kind::Stderr(_)) {
                app.activity.touch(&app.store, id);
            }
            if to_user.send(Message::Binary(kind.encode())).await.is_err() || last {
                let _ = to_user.close().await;
                return;
            }
        }
    };
    tokio::pin!(upstream, downstream);
    tokio::select! {
        _ = &mut upstream => {}
        _ = &mut downstream => {
            // The user was told the end; the connection is dropped once the user answered the
            // close (or after `CLOSE_WITHIN`), since dropping it with the user's messages
            // unread makes the kernel reset it, and a reset may discard the last output the
            // user had not read yet.
            let _ = tokio::time::timeout(CLOSE_WITHIN, &mut upstream).await;
        }
    }
}
