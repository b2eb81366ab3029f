//! Serving the API: the accept loop, its connection limit and timeouts, and HTTPS.
//!
//! Every connection holds a permit of a semaphore sized `max_connections`. At the limit the
//! loop stops accepting: new connections wait in the kernel's listen backlog (they cost the
//! manager no file descriptor there) and are accepted, in order, as permits come back. Closing
//! them at once instead would turn a burst of legitimate agents into errors and retries.
//!
//! What a connection may hold a permit for is bounded:
//! - a new connection must deliver its first request head within `header_timeout` (the TLS
//!   handshake included); a later head must arrive within `header_timeout` of its first byte;
//! - between requests, a keep-alive connection may stay silent for `idle_timeout`;
//! - a request body (and a response the client does not read) may stall for `body_timeout`;
//!   the clock restarts with every chunk, so slow but steady uploads go on, and a request is
//!   not limited as a whole, so agents' long polls (held up to the heartbeat) are untouched.
//!
//! A request whose body stalls is answered `408 request_timeout` and its connection closed.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{header, Request, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_rustls::rustls;
use tower_service::Service;

use crate::error::ApiError;
use crate::ManagerError;

/// Timeouts and the limit of the API's connections.
#[derive(Debug, Clone)]
pub struct Connections {
    /// How long a client may take to send a request head (and a TLS handshake).
    pub header_timeout: Duration,
    /// How long a keep-alive connection may stay silent between requests.
    pub idle_timeout: Duration,
    /// How long a request body may stall (no new bytes), or a client leave the response
    /// unread.
    pub body_timeout: Duration,
    /// Connections served at once; more wait to be accepted. `None`: the open-file limit
    /// (`ulimit -n`) less a quarter of it, at least 256 and at most 1024 descriptors, kept for
    /// everything else.
    pub max_connections: Option<usize>,
}

impl Default for Connections {
    fn default() -> Self {
        Connections {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            max_connections: None,
        }
    }
}

/// The manager's certificate chain and private key, PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What serving needs, checked at start: the limits and, for HTTPS, the loaded certificate.
pub(crate) struct Serving {
    connections: Connections,
    max_connections: usize,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Serving {
    pub(crate) fn new(
        connections: &Connections,
        tls: Option<&TlsFiles>,
    ) -> Result<Serving, ManagerError> {
        let max_connections = connections
            .max_connections
            .unwrap_or_else(default_max_connections)
            .clamp(1, Semaphore::MAX_PERMITS);
        let tls = tls.map(acceptor).transpose()?;
        Ok(Serving {
            connections: connections.clone(),
            max_connections,
            tls,
        })
    }

    pub(crate) fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// The soft open-file limit less a quarter of it, at least 256 and at most 1024 descriptors,
/// kept for the database, providers, session files and logs.
fn default_max_connections() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let nofile = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        1024
    } else if lim.rlim_cur == libc::RLIM_INFINITY {
        usize::MAX
    } else {
        usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
    };
    let reserve = (nofile / 4).clamp(256, 1024);
    nofile.saturating_sub(reserve).max(16)
}

/// The TLS server configuration from PEM files; an error names the file at fault.
fn acceptor(files: &TlsFiles) -> Result<tokio_rustls::TlsAcceptor, ManagerError> {
    use rustls::pki_types::pem::{self, PemObject};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let fail = |path: &Path, message: String| ManagerError::Tls {
        path: path.to_path_buf(),
        message,
    };
    let pem_error = |path: &Path, what: &str, e: pem::Error| match e {
        pem::Error::Io(e) => fail(path, format!("cannot read it: {e}")),
        pem::Error::NoItemsFound => fail(path, format!("no PEM {what} in it")),
        e => fail(path, format!("not a PEM {what}: {e}")),
    };
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| pem_error(&files.cert, "certificate", e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(&files.cert, "certificate", e))?;
    if certs.is_empty() {
        return Err(fail(
            &files.cert,
            "no PEM certificate (BEGIN CERTIFICATE) in it".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| pem_error(&files.key, "private key", e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(&files.cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            fail(
                &files.key,
                format!(
                    "does not go with the certificate in {}: {e}",
                    files.cert.display()
                ),
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets the requests in flight
/// finish (each connection closes after its current response).
pub(crate) async fn run(
    listener: TcpListener,
    router: Router,
    serving: Arc<Serving>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ManagerError> {
    let permits = Arc::new(Semaphore::new(serving.max_connections));
    // Connections watch `stop` for the shutdown; each holds a `done` receiver, so the loop
    // knows when the last one is gone.
    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, done_rx) = watch::channel(());
    tokio::pin!(shutdown);
    // Said once each time the limit is reached, not for every connection at it.
    let mut at_limit = false;
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    drop(permit);
                    if !is_connection_error(&e) {
                        // Out of descriptors, most likely: wait for some to come back.
                        tracing::error!(error = %e, "accepting a connection failed; retrying in 1 s");
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_secs(1)) => {}
                            () = &mut shutdown => break,
                        }
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let full = permits.available_permits() == 0;
        if full && !at_limit {
            tracing::warn!(
                limit = serving.max_connections,
                "connection limit reached: new connections wait to be accepted"
            );
        }
        at_limit = full;
        let _ = tcp.set_nodelay(true);
        let serving = serving.clone();
        let router = router.clone();
        let stop = stop_rx.clone();
        let done = done_rx.clone();
        tokio::spawn(async move {
            // Dropped last: the socket is closed before the permit lets another in.
            let _permit = permit;
            let _done = done;
            if let Err(e) = connection(tcp, router, &serving, stop).await {
                tracing::debug!(%peer, error = %e, "connection closed");
            }
        });
    }
    drop(listener);
    drop(stop_rx);
    drop(done_rx);
    let _ = stop_tx.send(true);
    done_tx.closed().await;
    Ok(())
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// One connection: the TLS handshake if any, then HTTP/1.1 until the client leaves, a
/// timeout strikes, or the manager stops.
async fn connection(
    tcp: TcpStream,
    router: Router,
    serving: &Serving,
    mut stop: watch::Receiver<bool>,
) -> Result<(), BoxError> {
    let limits = &serving.connections;
    let Some(acceptor) = &serving.tls else {
        return http(Guarded::new(tcp, limits), router, limits, stop).await;
    };
    let handshake = async {
        if !starts_like_tls(&tcp).await? {
            plain_http_refused(tcp).await;
            return Ok(None);
        }
        acceptor.accept(tcp).await.map(Some)
    };
    let tls = tokio::select! {
        r = tokio::time::timeout(limits.header_timeout, handshake) => match r {
            Ok(Ok(Some(tls))) => tls,
            Ok(Ok(None)) => return Ok(()),
            Ok(Err(e)) => return Err(format!("TLS handshake: {e}").into()),
            Err(_) => return Err("TLS handshake timed out".into()),
        },
        _ = stop.wait_for(|s| *s) => return Ok(()),
    };
    http(Guarded::new(tls, limits), router, limits, stop).await
}

/// Whether the first byte the client sent opens a TLS handshake record (0x16).
async fn starts_like_tls(tcp: &TcpStream) -> io::Result<bool> {
    let mut first = [0u8; 1];
    let n = tcp.peek(&mut first).await?;
    Ok(n == 1 && first[0] == 0x16)
}

/// Plain HTTP sent to the HTTPS port: a 400 that says so, then close.
async fn plain_http_refused(mut tcp: TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = "this manager serves HTTPS: use an https:// URL\n";
    let reply = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tcp.write_all(reply.as_bytes()).await;
    let _ = tcp.shutdown().await;
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Serves HTTP/1.1 on one connection.
async fn http<IO>(
    io: Guarded<IO>,
    router: Router,
    limits: &Connections,
    mut stop: watch::Receiver<bool>,
) -> Result<(), BoxError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let in_flight = io.in_flight.clone();
    let body_timeout = limits.body_timeout;
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let guard = InFlight::enter(&in_flight);
        let stalled = Arc::new(AtomicBool::new(false));
        let req = req.map(|body| StallTimeout {
            body,
            timeout: body_timeout,
            sleep: None,
            stalled: stalled.clone(),
        });
        let mut router = router.clone();
        async move {
            // A `Router` is always ready: no `poll_ready` needed.
            let response = match router.call(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                guard.0.upgraded.store(true, Ordering::Release);
            }
            let response = if stalled.load(Ordering::Acquire) {
                let mut r = ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    format!(
                        "the request body stalled for more than {} s",
                        body_timeout.as_secs_f64()
                    ),
                )
                .into_response();
                r.headers_mut().insert(
                    header::CONNECTION,
                    header::HeaderValue::from_static("close"),
                );
                r
            } else {
                response
            };
            // The connection counts as busy until the response is sent (or given up).
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(Tracked {
                    body,
                    _guard: guard,
                })
            }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        // The head's deadline is `Guarded`'s, which tells idle waits from slow heads.
        .header_read_timeout(None)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => return r.map_err(Into::into),
        _ = stop.wait_for(|s| *s) => conn.as_mut().graceful_shutdown(),
    }
    conn.await.map_err(Into::into)
}

/// The requests of a connection in flight, and the reader to wake when the last one is done
/// (hyper may not read again by itself: the idle deadline must start).
#[derive(Default)]
struct Requests {
    count: AtomicUsize,
    /// Switched protocols (a WebSocket): no request deadline applies any more; the tunnel's
    /// and the terminals' own keepalive finds a dead peer.
    upgraded: AtomicBool,
    reader: std::sync::Mutex<Option<std::task::Waker>>,
}

impl Requests {
    fn busy(&self, cx: &Context<'_>) -> bool {
        if self.upgraded.load(Ordering::Acquire) {
            return true;
        }
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        match &*reader {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => *reader = Some(cx.waker().clone()),
        }
        drop(reader);
        // Checked again: a request that ended meanwhile found no waker to wake.
        self.count.load(Ordering::Acquire) > 0
    }
}

/// Counts a request from its head until its response is sent or dropped.
struct InFlight(Arc<Requests>);

impl InFlight {
    fn enter(requests: &Arc<Requests>) -> InFlight {
        requests.count.fetch_add(1, Ordering::AcqRel);
        InFlight(requests.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            let reader = self
                .0
                .reader
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some(w) = reader {
                w.wake();
            }
        }
    }
}

/// A response body that keeps its request counted while it is being sent.
struct Tracked {
    body: Body,
    _guard: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A request body that fails once no bytes came for `timeout` while it was being read, and
/// says so through `stalled`.
struct StallTimeout {
    body: Incoming,
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    stalled: Arc<AtomicBool>,
}

impl HttpBody for StallTimeout {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            this.sleep = None;
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let timeout = this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if sleep.as_mut().poll(cx).is_ready() {
            this.stalled.store(true, Ordering::Release);
            return Poll::Ready(Some(Err("the request body stalled".into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Where a connection is between requests, for its read deadline.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// A request is in flight: its body (if read) has its own timeout, and an agent's long
    /// poll may hold it quietly.
    Busy,
    /// Waiting for the first byte of the next request.
    Idle,
    /// Reading a request head.
    Head,
}

/// A connection's stream with its read deadline (idle, then head) between requests and its
/// write deadline when the client does not read.
struct Guarded<IO> {
    io: IO,
    in_flight: Arc<Requests>,
    phase: Phase,
    read_deadline: Pin<Box<Sleep>>,
    write_deadline: Pin<Box<Sleep>>,
    write_stalled: bool,
    header_timeout: Duration,
    idle_timeout: Duration,
    body_timeout: Duration,
}

impl<IO> Guarded<IO> {
    /// A new connection owes its first request head within the header timeout.
    fn new(io: IO, limits: &Connections) -> Guarded<IO> {
        let now = Instant::now();
        Guarded {
            io,
            in_flight: Arc::default(),
            phase: Phase::Head,
            read_deadline: Box::pin(tokio::time::sleep_until(now + limits.header_timeout)),
            write_deadline: Box::pin(tokio::time::sleep_until(now + limits.body_timeout)),
            write_stalled: false,
            header_timeout: limits.header_timeout,
            idle_timeout: limits.idle_timeout,
            body_timeout: limits.body_timeout,
        }
    }

    fn enter(&mut self, phase: Phase, timeout: Duration) {
        self.phase = phase;
        self.read_deadline.as_mut().reset(Instant::now() + timeout);
    }

    /// A write that made no progress starts (or checks) the write deadline; progress clears it.
    fn write_progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.write_stalled = false;
            return r;
        }
        if !self.write_stalled {
            self.write_stalled = true;
            let at = Instant::now() + self.body_timeout;
            self.write_deadline.as_mut().reset(at);
        }
        if self.write_deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading the response",
            )));
        }
        Poll::Pending
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.in_flight.busy(cx) {
            this.phase = Phase::Busy;
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        if this.phase == Phase::Busy {
            this.enter(Phase::Idle, this.idle_timeout);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.phase == Phase::Idle && buf.filled().len() > before {
                    this.enter(Phase::Head, this.header_timeout);
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        if this.read_deadline.as_mut().poll(cx).is_ready() {
            let why = match this.phase {
                Phase::Idle => "idle keep-alive connection timed out",
                _ => "the request head did not arrive in time",
            };
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)));
        }
        Poll::Pending
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.write_progress(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.write_progress(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.write_progress(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        self.write_progress(cx, r)
    }
}
