//! One HTTP request to an app, carried over a new stream of the session's agent's tunnel to
//! the app's port, and its answer back; an upgrade the app accepts (a WebSocket: Jupyter's
//! kernels and terminals) is then carried both ways until either side ends. The path is kept
//! whole (`/apps/{session}/{app}/...`), as an app told its prefix expects.

use std::time::Duration;

use axum::body::Body;
use axum::http::header::{self, HeaderMap, HeaderName};
use axum::http::{Request, Response, StatusCode};
use corral_tunnel::{Open, Target, Tunnel};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::ApiError;
use crate::App;

/// How long the agent's answer (why the stream closed) is awaited once a request failed.
const WHY_WITHIN: Duration = Duration::from_secs(2);

/// Headers of one hop, never passed on (RFC 9110 7.6.1), but an upgrade's own.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Sends `request` to `port` of `session` through `tunnel`; `prefix` is the app's path.
pub(super) async fn forward(
    app: &App,
    tunnel: &Tunnel,
    (session, port, prefix): (&str, u16, &str),
    mut request: Request<Body>,
) -> Result<Response<Body>, ApiError> {
    // The user's hop speaks its own version, whatever the app answers in (HTTP/1.0 at times).
    let version = request.version();
    let upgrade = request.headers().contains_key(header::UPGRADE);
    let downstream = upgrade.then(|| hyper::upgrade::on(&mut request));
    strip_hop_by_hop(request.headers_mut(), upgrade);
    let headers = request.headers_mut();
    let host = headers.get(header::HOST).cloned();
    if let Some(host) = host {
        headers.insert("x-forwarded-host", host);
    }
    let proto = if app.https { "https" } else { "http" };
    headers.insert("x-forwarded-proto", proto.parse().expect("a header value"));
    if let Ok(prefix) = prefix.trim_end_matches('/').parse() {
        headers.insert("x-forwarded-prefix", prefix);
    }

    let open = Open {
        session: session.to_string(),
        target: Target::Tcp { port },
    };
    let stream = tunnel
        .open(&open)
        .map_err(|_| bad_gateway(format!("the tunnel to session {session}'s agent closed")))?;
    let (io, bridged) = corral_tunnel::into_io(stream);
    let answered = async {
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.with_upgrades().await {
                tracing::debug!(error = %e, "an app's connection ended");
            }
        });
        sender.send_request(request).await
    }
    .await;
    let mut response = match answered {
        Ok(response) => response,
        Err(e) => {
            // The agent says why when it could not reach the port.
            let why = tokio::time::timeout(WHY_WITHIN, bridged)
                .await
                .ok()
                .and_then(Result::ok)
                .flatten()
                .unwrap_or_else(|| e.to_string());
            return Err(bad_gateway(format!(
                "app on port {port} of session {session} did not answer: {why}"
            )));
        }
    };
    *response.version_mut() = version;
    let switched = response.status() == StatusCode::SWITCHING_PROTOCOLS;
    strip_hop_by_hop(response.headers_mut(), switched);
    if let (true, Some(downstream)) = (switched, downstream) {
        let upstream = hyper::upgrade::on(&mut response);
        let (app, session) = (app.clone(), session.to_string());
        tokio::spawn(async move {
            match tokio::try_join!(downstream, upstream) {
                Ok((user, agent)) => splice(&app, &session, user, agent).await,
                Err(e) => tracing::debug!(error = %e, "an app's upgrade failed"),
            }
        });
    }
    Ok(response.map(Body::new))
}

fn bad_gateway(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", message)
}

/// Drops the headers of one hop and those `Connection` names; an upgrade keeps its
/// `Connection: upgrade` and `Upgrade`.
fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| n.trim().parse().ok())
        .filter(|n| !(upgrade && *n == header::UPGRADE))
        .collect();
    for name in named.iter().chain(&HOP_BY_HOP) {
        if !(upgrade && *name == header::CONNECTION) {
            headers.remove(name);
        }
    }
    if upgrade {
        headers.insert(
            header::CONNECTION,
            "upgrade".parse().expect("a header value"),
        );
    } else {
        headers.remove(header::UPGRADE);
    }
}

/// Carries an upgraded connection both ways until either side ends; its traffic counts as
/// the session's use.
async fn splice(app: &App, session: &str, user: Upgraded, agent: Upgraded) {
    let (user_read, user_write) = tokio::io::split(TokioIo::new(user));
    let (agent_read, agent_write) = tokio::io::split(TokioIo::new(agent));
    tokio::select! {
        _ = pipe(app, session, user_read, agent_write) => {}
        _ = pipe(app, session, agent_read, user_write) => {}
    }
}

async fn pipe(
    app: &App,
    session: &str,
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
) {
    let mut buf = vec![0u8; 32 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        app.activity.touch(&app.store, session);
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go_but_an_upgrades_stay() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, "keep-alive, x-secret".parse().unwrap());
        headers.insert("x-secret", "1".parse().unwrap());
        headers.insert("keep-alive", "5".parse().unwrap());
        headers.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        headers.insert(header::UPGRADE, "websocket".parse().unwrap());
        headers.insert(header::COOKIE, "a=1".parse().unwrap());
        let mut plain = headers.clone();
        strip_hop_by_hop(&mut plain, false);
        assert_eq!(plain.len(), 1, "{plain:?}");
        assert!(plain.contains_key(header::COOKIE));

        headers.insert(header::CONNECTION, "Upgrade".parse().unwrap());
        strip_hop_by_hop(&mut headers, true);
        assert_eq!(headers[header::CONNECTION], "upgrade");
        assert_eq!(headers[header::UPGRADE], "websocket");
        assert!(!headers.contains_key(header::TRANSFER_ENCODING));
    }
}
