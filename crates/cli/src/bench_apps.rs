//! `corral bench interactive`'s apps: HTTP requests and WebSocket messages through the
//! manager's app proxy (`/apps/SESSION/web/`, over the agent's tunnel), each beside the same
//! traffic sent to the app directly. The app is served by this process (a small HTTP answer
//! and a WebSocket echo, so that it is never what limits), on a port the session declares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use axum::extract::ws::{Message as AppMessage, WebSocketUpgrade};
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Clients at once, for requests and for WebSockets (the figures' contract).
const CLIENTS: usize = 10;
/// A WebSocket message's size.
const MESSAGE: usize = 1024;
/// The request rate the added latency is measured at.
const RATE_PER_S: u64 = 100;

/// Where the app is reached: through the manager (with a token) or directly.
struct Route {
    base: String,
    authorization: Option<String>,
}

pub async fn run(
    submit: impl FnOnce(&[&str]) -> Result<String>,
    server: &str,
    token: &str,
    seconds: f64,
    latency_requests: usize,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let app = axum::Router::new()
        .route("/apps/{session}/web/ws", get(echo))
        .fallback(|| async { "ok" });
    tokio::spawn(async move { axum::serve(listener, app).await });
    let id = submit(&["--app", &format!("web={port}"), "--", "sleep", "1000000"])?;

    corral_api::tls::install_crypto_provider();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(CLIENTS)
        .tcp_nodelay(true)
        .build()?;
    let through = Route {
        base: format!("{}/apps/{id}/web", server.trim_end_matches('/')),
        authorization: Some(format!("Bearer {token}")),
    };
    let direct = Route {
        base: format!("http://127.0.0.1:{port}/apps/{id}/web"),
        authorization: None,
    };
    // Set-up, not measured: the agent's tunnel may still be on its way.
    let deadline = Instant::now() + Duration::from_secs(30);
    while get_once(&http, &through).await.is_err() {
        if Instant::now() > deadline {
            bail!("the app did not answer through the manager within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let window = Duration::from_secs_f64(seconds);
    let proxied = requests_per_s(&http, &through, window).await?;
    let plain = requests_per_s(&http, &direct, window).await?;
    println!("proxy_http_req_per_s {proxied:.0}");
    println!("direct_http_req_per_s {plain:.0}");

    let proxied = messages_per_s(&through, window).await?;
    let plain = messages_per_s(&direct, window).await?;
    println!("proxy_ws_msgs_per_s {proxied:.0}");
    println!("direct_ws_msgs_per_s {plain:.0}");

    let proxied = p99_at_rate(&http, &through, latency_requests).await?;
    let plain = p99_at_rate(&http, &direct, latency_requests).await?;
    println!("proxy_p99_ms {proxied:.2} ms");
    println!("direct_p99_ms {plain:.2} ms");
    println!("proxy_added_p99_ms {:.2} ms", (proxied - plain).max(0.0));
    Ok(())
}

async fn echo(ws: WebSocketUpgrade) -> axum::response::Response {
    ws.on_upgrade(|mut socket| async move {
        while let Some(Ok(message)) = socket.recv().await {
            if matches!(message, AppMessage::Binary(_) | AppMessage::Text(_))
                && socket.send(message).await.is_err()
            {
                return;
            }
        }
    })
}

async fn get_once(http: &reqwest::Client, route: &Route) -> Result<()> {
    let mut request = http.get(format!("{}/hello", route.base));
    if let Some(auth) = &route.authorization {
        request = request.header("authorization", auth);
    }
    let response = request.send().await?;
    if !response.status().is_success() {
        bail!("{}: {}", response.status(), response.text().await?);
    }
    response.bytes().await?;
    Ok(())
}

/// Requests answered per second by `CLIENTS` clients, each sending its next request once the
/// last was answered, for `window`.
async fn requests_per_s(http: &reqwest::Client, route: &Route, window: Duration) -> Result<f64> {
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let clients = (0..CLIENTS).map(|_| {
        let done = done.clone();
        async move {
            while start.elapsed() < window {
                get_once(http, route).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        }
    });
    for ended in futures_util::future::join_all(clients).await {
        ended?;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

/// 1 KiB messages echoed per second over `CLIENTS` WebSockets, each sending its next message
/// once the last came back, for `window`.
async fn messages_per_s(route: &Route, window: Duration) -> Result<f64> {
    let url = format!("{}/ws", route.base.replacen("http", "ws", 1));
    let mut sockets = Vec::new();
    for _ in 0..CLIENTS {
        let mut request = url.as_str().into_client_request()?;
        if let Some(auth) = &route.authorization {
            request.headers_mut().insert("authorization", auth.parse()?);
        }
        let (socket, _) = tokio_tungstenite::connect_async(request)
            .await
            .with_context(|| format!("a WebSocket to {url}"))?;
        sockets.push(socket);
    }
    let payload = bytes::Bytes::from(vec![7u8; MESSAGE]);
    let start = Instant::now();
    let clients = sockets.into_iter().map(|mut socket| {
        let payload = payload.clone();
        async move {
            let mut echoed = 0u64;
            while start.elapsed() < window {
                socket.send(Message::Binary(payload.clone())).await?;
                match socket.next().await {
                    Some(Ok(Message::Binary(b))) if b.len() == MESSAGE => echoed += 1,
                    other => bail!("the echo was {other:?}"),
                }
            }
            let _ = socket.close(None).await;
            Ok(echoed)
        }
    });
    let mut echoed = 0;
    for client in futures_util::future::join_all(clients).await {
        echoed += client?;
    }
    Ok(echoed as f64 / start.elapsed().as_secs_f64())
}

/// The 99th percentile of `n` requests' times, one sent every 1/`RATE_PER_S` s.
async fn p99_at_rate(http: &reqwest::Client, route: &Route, n: usize) -> Result<f64> {
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE_PER_S));
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        tick.tick().await;
        let sent = Instant::now();
        get_once(http, route).await?;
        ms.push(sent.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[(ms.len() * 99 / 100).min(ms.len() - 1)])
}
