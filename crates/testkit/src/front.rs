//! A TCP front for several managers, as the load balancer before them would be in production:
//! each connection goes to the next backend, in turn, that accepts it; a backend that is down
//! is skipped. Agents and clients given its address keep working while any manager does.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Listens on a free loopback port until dropped.
pub struct Front {
    addr: SocketAddr,
    stopped: Arc<AtomicBool>,
}

impl Front {
    /// Starts forwarding to `backends`.
    pub fn start(backends: Vec<SocketAddr>) -> std::io::Result<Front> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stopped = Arc::new(AtomicBool::new(false));
        let stop = stopped.clone();
        let next = Arc::new(AtomicUsize::new(0));
        thread::spawn(move || {
            for client in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let start = next.fetch_add(1, Ordering::SeqCst);
                let backends = backends.clone();
                thread::spawn(move || forward(client, &backends, start));
            }
        });
        Ok(Front { addr, stopped })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn forward(client: TcpStream, backends: &[SocketAddr], start: usize) {
    let backend = (0..backends.len()).find_map(|i| {
        let addr = backends[(start + i) % backends.len()];
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()
    });
    let Some(backend) = backend else {
        return;
    };
    let (Ok(client_read), Ok(backend_write)) = (client.try_clone(), backend.try_clone()) else {
        return;
    };
    let up = thread::spawn(move || pipe(client_read, backend_write));
    pipe(backend, client);
    let _ = up.join();
}

/// Copies until either side ends, then ends both directions of `to`.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
