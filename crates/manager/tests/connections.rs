//! The API's connections are bounded: slow or silent clients are closed after the configured
//! timeouts, at most `max_connections` are served at once, and what legitimate clients do
//! (long polls, slow but steady uploads, keep-alive) still works. Real sockets on loopback.

use std::io::Read;
use std::time::{Duration, Instant};

use corral_manager::serve::Connections;
use corral_manager::{serve_on, start, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What bounds every wait here: proves "does not hang forever", never how fast.
const BOUND: Duration = Duration::from_secs(30);

struct Server {
    addr: std::net::SocketAddr,
    admin: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    serving: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(connections: Connections) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().join("data"),
            listen: "127.0.0.1:0".parse().unwrap(),
            heartbeat: Duration::from_secs(3),
            connections,
            ..Config::default()
        };
        let app = start(&config).await.expect("manager starts");
        let listener = tokio::net::TcpListener::bind(config.listen).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(async move {
            serve_on(listener, app, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        let admin = std::fs::read_to_string(config.data_dir.join("admin.token"))
            .unwrap()
            .trim()
            .to_string();
        Server {
            addr,
            admin,
            stop: Some(stop),
            serving,
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

/// A plain HTTP client (reqwest is built for rustls with ring, installed here).
fn client() -> reqwest::Client {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// Short timeouts for the one under test; the others long enough never to strike here.
fn limits(header: u64, idle: u64, body: u64) -> Connections {
    Connections {
        header_timeout: Duration::from_secs(header),
        idle_timeout: Duration::from_secs(idle),
        body_timeout: Duration::from_secs(body),
        max_connections: None,
    }
}

/// Reads until the server closes the connection; what it sent, or a panic after `BOUND`.
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(BOUND, stream.read(&mut buf)).await {
            Err(_) => panic!(
                "the server kept the connection open (sent so far: {:?})",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return String::from_utf8_lossy(&got).into_owned(),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one response whose body has a Content-Length; returns its head and body.
async fn response(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return text;
            }
        }
        let n = tokio::time::timeout(BOUND, stream.read(&mut buf))
            .await
            .expect("a response within the bound")
            .expect("reading the response");
        assert!(n > 0, "closed mid-response: {text:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_sent_in_part_is_closed_after_the_header_timeout() {
    let server = Server::start(limits(1, 60, 60)).await;
    let mut half = TcpStream::connect(server.addr).await.unwrap();
    half.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: corral\r\n")
        .await
        .unwrap();
    // A connection that never sends a byte is closed too.
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    assert_eq!(until_closed(&mut half).await, "");
    assert_eq!(until_closed(&mut silent).await, "");

    // A whole head is answered, as before.
    let mut whole = TcpStream::connect(server.addr).await.unwrap();
    whole
        .write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: corral\r\n\r\n")
        .await
        .unwrap();
    let answer = response(&mut whole).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_request_body_is_answered_408_and_closed_but_a_slow_steady_one_is_not() {
    let server = Server::start(limits(60, 60, 2)).await;

    // Slow but steady: a byte of body every 100 ms, for longer than the body timeout.
    let body = format!(
        r#"{{"name": "slow", "policy": {{"kind": "fixed"}}}}{}"#,
        " ".repeat(30)
    );
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /api/v1/groups HTTP/1.1\r\nHost: corral\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        server.admin,
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    for b in body.as_bytes() {
        slow.write_all(&[*b]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = response(&mut slow).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    // The precondition of this case: the upload lasted longer than the body timeout.
    assert!(started.elapsed() > Duration::from_secs(2));

    // Stalled: the head and part of the body, then nothing.
    let mut stalled = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /api/v1/groups HTTP/1.1\r\nHost: corral\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"name\": ",
        server.admin
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    let answer = until_closed(&mut stalled).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    // Nothing of the stalled request was stored.
    let groups: serde_json::Value = client()
        .get(server.url("/api/v1/groups"))
        .bearer_auth(&server.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(groups.as_array().map(Vec::len), Some(1), "{groups}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let server = Server::start(limits(60, 1, 60)).await;
    let mut conn = TcpStream::connect(server.addr).await.unwrap();
    // Kept alive between requests sent back to back...
    for _ in 0..2 {
        conn.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: corral\r\n\r\n")
            .await
            .unwrap();
        let answer = response(&mut conn).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    // ...and closed once silent.
    assert_eq!(until_closed(&mut conn).await, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_long_poll_outlasts_every_timeout() {
    let server = Server::start(limits(1, 1, 1)).await;
    let client = client();
    let post = |path: &str, token: &str, body: &str| {
        client
            .post(server.url(path))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let r = post(
        "/api/v1/groups",
        &server.admin,
        r#"{"name": "g", "policy": {"kind": "fixed"}}"#,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
    let r = post(
        "/api/v1/agents/join",
        &server.admin,
        r#"{"id": "a1", "group": "g", "capacity": "cpu=1"}"#,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
    let token = r.json::<serde_json::Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    // Nothing to do: the manager holds the answer for the heartbeat (3 s), three times the
    // timeouts, and then answers.
    let started = Instant::now();
    let r = post("/api/v1/agents/a1/sync", &token, r#"{"wait_secs": 3}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    assert!(started.elapsed() > Duration::from_secs(2), "it was held");
}

/// Whether the server closed this (non-blocking) connection.
fn closed(stream: &mut std::net::TcpStream) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_connection_limit_clients_wait_for_a_free_place() {
    const LIMIT: usize = 4;
    const EXTRA: usize = 2;
    let server = Server::start(Connections {
        max_connections: Some(LIMIT),
        ..limits(1, 60, 60)
    })
    .await;
    // LIMIT + EXTRA clients that open a request head and stall (blocking sockets: they are
    // only written to, then read without blocking).
    let mut stalled: Vec<std::net::TcpStream> = (0..LIMIT + EXTRA)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(server.addr).unwrap();
            std::io::Write::write_all(&mut s, b"GET /api/v1/health HTTP/1.1\r\n").unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();

    // A real request behind them is answered once the stalled ones time out...
    let answer = tokio::time::timeout(
        BOUND,
        client()
            .get(server.url("/api/v1/groups"))
            .bearer_auth(&server.admin)
            .send(),
    )
    .await
    .expect("the request is answered once places free up")
    .unwrap();
    assert_eq!(answer.status(), 200);
    // ...and not before: it was served only after the server let go of a connection among the
    // first LIMIT (at the limit, the rest wait to be accepted).
    let let_go = stalled[..LIMIT]
        .iter_mut()
        .map(closed)
        .filter(|c| *c)
        .count();
    assert!(
        let_go >= 1,
        "the request was served while {LIMIT} connections were held"
    );
    // All stalled ones are closed in the end, those accepted late included.
    for s in stalled {
        until_closed(&mut TcpStream::from_std(s).unwrap()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_closes_idle_connections_and_returns() {
    let mut server = Server::start(limits(60, 60, 60)).await;
    let mut conn = TcpStream::connect(server.addr).await.unwrap();
    conn.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: corral\r\n\r\n")
        .await
        .unwrap();
    assert!(response(&mut conn).await.starts_with("HTTP/1.1 200"));
    server.stop.take().unwrap().send(()).unwrap();
    assert_eq!(until_closed(&mut conn).await, "");
    tokio::time::timeout(BOUND, &mut server.serving)
        .await
        .expect("serve_on returns after the shutdown")
        .unwrap();
    assert!(
        TcpStream::connect(server.addr).await.is_err(),
        "still listening"
    );
}
