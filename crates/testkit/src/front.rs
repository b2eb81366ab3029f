//! A TCP front for several managers, as the load balancer before them would be in production:
//! each connection goes to the next backend, in turn, that accepts it; a backend that is down
//! is skipped. Agents and clients given its address keep working while any manager does.
//!
//! It also stands in for a network partition: [`Front::cut`] ends the connections through it
//! and holds new ones without an answer (as a path that drops every packet would) until
//! [`Front::mend`].

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// Listens on a free loopback port until dropped.
pub struct Front {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// A connection silent both ways this long is dropped, as a load balancer's idle timeout
    /// drops it.
    idle: Option<Duration>,
    stopped: AtomicBool,
    cut: AtomicBool,
    /// The connections forwarded now, by number: a cut ends them.
    open: Mutex<HashMap<usize, TcpStream>>,
}

impl Front {
    /// Starts forwarding to `backends`.
    pub fn start(backends: Vec<SocketAddr>) -> std::io::Result<Front> {
        Front::start_on("127.0.0.1".parse().expect("an address"), backends)
    }

    /// [`Front::start`], listening on a free port of `ip` (an address clients in a network
    /// namespace reach).
    pub fn start_on(ip: std::net::IpAddr, backends: Vec<SocketAddr>) -> std::io::Result<Front> {
        Front::start_with(ip, backends, None)
    }

    /// [`Front::start`] that drops a connection silent both ways for `idle`, as load
    /// balancers do (AWS's default: 60 s).
    pub fn start_idle(backends: Vec<SocketAddr>, idle: Duration) -> std::io::Result<Front> {
        Front::start_with(
            "127.0.0.1".parse().expect("an address"),
            backends,
            Some(idle),
        )
    }

    fn start_with(
        ip: std::net::IpAddr,
        backends: Vec<SocketAddr>,
        idle: Option<Duration>,
    ) -> std::io::Result<Front> {
        let listener = TcpListener::bind((ip, 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            idle,
            ..Shared::default()
        });
        let accepting = shared.clone();
        let next = Arc::new(AtomicUsize::new(0));
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let n = next.fetch_add(1, Ordering::SeqCst);
                let backends = backends.clone();
                let shared = accepting.clone();
                thread::spawn(move || forward(client, &backends, n, &shared));
            }
        });
        Ok(Front { addr, shared })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Partitions the clients from the backends: the connections through the front end, and
    /// new ones are held unanswered until [`Front::mend`].
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        let open: Vec<TcpStream> = lock(&self.shared.open).drain().map(|(_, s)| s).collect();
        for stream in open {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Ends the partition: held connections are closed (their clients try again) and new
    /// ones are forwarded.
    pub fn mend(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.cut.store(false, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn forward(client: TcpStream, backends: &[SocketAddr], n: usize, shared: &Shared) {
    if shared.cut.load(Ordering::SeqCst) {
        // Nothing goes through; the client waits as it would on a dead path.
        while shared.cut.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(20));
        }
        return;
    }
    let backend = (0..backends.len()).find_map(|i| {
        let addr = backends[(n + i) % backends.len()];
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()
    });
    let Some(backend) = backend else {
        return;
    };
    let (Ok(client_read), Ok(backend_write), Ok(kept)) =
        (client.try_clone(), backend.try_clone(), client.try_clone())
    else {
        return;
    };
    lock(&shared.open).insert(n, kept);
    // Cut between the look above and now: it did not see this one.
    if shared.cut.load(Ordering::SeqCst) {
        let _ = client.shutdown(Shutdown::Both);
    }
    let heard = Arc::new(Mutex::new(std::time::Instant::now()));
    let (idle, heard_up) = (shared.idle, heard.clone());
    let up = thread::spawn(move || pipe(client_read, backend_write, idle, &heard_up));
    pipe(backend, client, shared.idle, &heard);
    let _ = up.join();
    lock(&shared.open).remove(&n);
}

/// Copies until either side ends, then ends both directions of `to`; with `idle`, also once
/// nothing went either way (`heard`, shared by both directions) for that long.
fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    idle: Option<Duration>,
    heard: &Mutex<std::time::Instant>,
) {
    let mut buf = [0u8; 16 * 1024];
    if let Some(idle) = idle {
        let _ = from.set_read_timeout(Some((idle / 10).max(Duration::from_millis(10))));
    }
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if idle.is_some_and(|idle| lock(heard).elapsed() >= idle) {
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                    return;
                }
            }
            Err(_) => break,
            Ok(n) => {
                *lock(heard) = std::time::Instant::now();
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
