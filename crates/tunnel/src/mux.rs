//! The tunnel's connection: many streams over one message transport (a WebSocket's binary
//! messages). A reader task sorts incoming frames to their streams and a writer task sends
//! what the streams queue, with a ping every [`Keepalive::ping_every`] so that no proxy on
//! the way sees the connection idle; a connection silent for [`Keepalive::dead_after`] is
//! taken as lost. Only the opening side (the manager) opens streams; the other accepts them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Sink, SinkExt, Stream as FutStream, StreamExt};
use tokio::sync::{mpsc, watch, Semaphore};

use crate::frame::{Frame, Kind};
use crate::open::Open;
use crate::stream::{Closed, Stream, StreamState, WINDOW};

/// How often each side pings, and how long a silent connection lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    pub ping_every: Duration,
    pub dead_after: Duration,
}

impl Default for Keepalive {
    /// A ping every 15 s (under the 20 s that keeps a 60 s idle timeout of any proxy far
    /// away), lost after three pings unanswered.
    fn default() -> Self {
        Keepalive {
            ping_every: Duration::from_secs(15),
            dead_after: Duration::from_secs(45),
        }
    }
}

/// The variable that sets the ping interval in seconds (1 to 3600) on the manager and the
/// agent, for a proxy whose idle timeout is shorter than 20 s; the dead-peer time is three
/// intervals.
pub const KEEPALIVE_ENV: &str = "CORRAL_KEEPALIVE_SECS";

impl Keepalive {
    /// [`KEEPALIVE_ENV`]'s interval, else the default; a value out of range is reported and
    /// the default kept.
    pub fn from_env() -> Keepalive {
        let Ok(text) = std::env::var(KEEPALIVE_ENV) else {
            return Keepalive::default();
        };
        match text.trim().parse::<u64>() {
            Ok(secs @ 1..=3600) => Keepalive {
                ping_every: Duration::from_secs(secs),
                dead_after: Duration::from_secs(3 * secs),
            },
            _ => {
                tracing::warn!(
                    "{KEEPALIVE_ENV}={text:?} is not 1 to 3600 seconds; pinging every 15 s"
                );
                Keepalive::default()
            }
        }
    }
}

/// Which end of the tunnel this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Opens streams (the manager).
    Opener,
    /// Accepts them (the agent).
    Acceptor,
}

struct Entry {
    inbound: mpsc::UnboundedSender<Kind>,
    send_credit: Arc<Semaphore>,
    unacknowledged: Arc<AtomicUsize>,
}

/// What the tasks and the streams of one connection share.
pub(crate) struct Shared {
    streams: Mutex<HashMap<u32, Entry>>,
    out: mpsc::UnboundedSender<Bytes>,
    next_id: AtomicU32,
    closed: watch::Sender<bool>,
}

impl Shared {
    pub(crate) fn send(&self, frame: Frame) {
        // A send after the writer ended is lost with the connection, as it should be.
        let _ = self.out.send(frame.encode());
    }

    pub(crate) fn forget(&self, id: u32) {
        self.streams.lock().expect("not poisoned").remove(&id);
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    fn register(self: &Arc<Self>, id: u32) -> Result<Stream, Closed> {
        let (tx, rx) = mpsc::unbounded_channel();
        let send_credit = Arc::new(Semaphore::new(WINDOW));
        let unacknowledged = Arc::new(AtomicUsize::new(0));
        let mut streams = self.streams.lock().expect("not poisoned");
        if self.is_closed() {
            return Err(Closed);
        }
        streams.insert(
            id,
            Entry {
                inbound: tx,
                send_credit: send_credit.clone(),
                unacknowledged: unacknowledged.clone(),
            },
        );
        drop(streams);
        Ok(Stream::new(
            StreamState::new(id, self.clone(), send_credit, unacknowledged),
            rx,
        ))
    }

    /// The connection is gone: every stream learns it (its receiver ends, its sender fails).
    fn shut(&self) {
        self.closed.send_replace(true);
        for (_, entry) in self.streams.lock().expect("not poisoned").drain() {
            entry.send_credit.close();
        }
    }
}

/// A handle on one tunnel connection; clones share it.
#[derive(Clone)]
pub struct Tunnel {
    shared: Arc<Shared>,
}

/// A stream the other side opened, with what it was opened for.
pub struct Accepted {
    pub open: Open,
    pub stream: Stream,
}

impl Tunnel {
    /// Starts a connection's tasks over a transport of binary messages; returns the handle
    /// and, for the accepting side, the streams the other side opens.
    pub fn start<In, Out, E>(
        incoming: In,
        outgoing: Out,
        side: Side,
        keepalive: Keepalive,
    ) -> (Tunnel, mpsc::UnboundedReceiver<Accepted>)
    where
        In: FutStream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
        Out: Sink<Bytes> + Send + Unpin + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            streams: Mutex::new(HashMap::new()),
            out: out_tx,
            next_id: AtomicU32::new(1),
            closed: watch::Sender::new(false),
        });
        let (accept_tx, accept_rx) = mpsc::unbounded_channel();
        tokio::spawn(write(shared.clone(), outgoing, out_rx, keepalive));
        tokio::spawn(read(shared.clone(), incoming, side, accept_tx, keepalive));
        (Tunnel { shared }, accept_rx)
    }

    /// Opens a stream for `open`. The other side answers on it, or closes it with a reason.
    pub fn open(&self, open: &Open) -> Result<Stream, Closed> {
        let id = self.shared.next_id.fetch_add(1, Ordering::SeqCst);
        let stream = self.shared.register(id)?;
        self.shared
            .send(Frame::new(id, Kind::Open(open.to_bytes())));
        Ok(stream)
    }

    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Resolves once the connection is gone.
    pub async fn closed(&self) {
        let mut rx = self.shared.closed.subscribe();
        let _ = rx.wait_for(|closed| *closed).await;
    }

    /// Ends the connection (its streams see the end).
    pub fn shut(&self) {
        self.shared.shut();
    }

    /// How many streams are open.
    pub fn streams(&self) -> usize {
        self.shared.streams.lock().expect("not poisoned").len()
    }
}

async fn write<Out: Sink<Bytes> + Unpin>(
    shared: Arc<Shared>,
    mut outgoing: Out,
    mut queue: mpsc::UnboundedReceiver<Bytes>,
    keepalive: Keepalive,
) {
    let mut closed = shared.closed.subscribe();
    let mut ping = tokio::time::interval(keepalive.ping_every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let message = tokio::select! {
            message = queue.recv() => match message {
                Some(message) => message,
                None => break,
            },
            _ = ping.tick() => Frame::new(0, Kind::Ping(Bytes::new())).encode(),
            _ = closed.wait_for(|c| *c) => break,
        };
        if outgoing.feed(message).await.is_err() {
            break;
        }
        // Whatever else is queued goes out in the same flush.
        while let Ok(message) = queue.try_recv() {
            if outgoing.feed(message).await.is_err() {
                shared.shut();
                return;
            }
        }
        if outgoing.flush().await.is_err() {
            break;
        }
    }
    let _ = outgoing.close().await;
    shared.shut();
}

async fn read<In, E>(
    shared: Arc<Shared>,
    mut incoming: In,
    side: Side,
    accept: mpsc::UnboundedSender<Accepted>,
    keepalive: Keepalive,
) where
    In: FutStream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut closed = shared.closed.subscribe();
    loop {
        let message = tokio::select! {
            next = tokio::time::timeout(keepalive.dead_after, incoming.next()) => next,
            _ = closed.wait_for(|c| *c) => break,
        };
        let bytes = match message {
            Ok(Some(Ok(bytes))) => bytes,
            Ok(Some(Err(e))) => {
                tracing::info!("tunnel: the connection failed: {e}");
                break;
            }
            Ok(None) => break,
            Err(_) => {
                tracing::info!(
                    "tunnel: nothing heard for {:?}; the connection is lost",
                    keepalive.dead_after
                );
                break;
            }
        };
        match Frame::decode(bytes) {
            Ok(frame) => on_frame(&shared, frame, side, &accept),
            Err((Some(stream), e)) => {
                tracing::info!("tunnel: stream {stream}: {e}");
                refuse(&shared, stream, &format!("a bad frame: {e}"));
            }
            Err((None, e)) => tracing::info!("tunnel: a frame ignored: {e}"),
        }
    }
    shared.shut();
}

/// Ends a stream from this side, telling its user (if any) why.
fn refuse(shared: &Arc<Shared>, id: u32, reason: &str) {
    let entry = shared.streams.lock().expect("not poisoned").remove(&id);
    if let Some(entry) = entry {
        entry.send_credit.close();
        let _ = entry.inbound.send(Kind::Close(reason.to_string()));
    }
    shared.send(Frame::new(id, Kind::Close(reason.to_string())));
}

fn on_frame(
    shared: &Arc<Shared>,
    frame: Frame,
    side: Side,
    accept: &mpsc::UnboundedSender<Accepted>,
) {
    let Frame { stream: id, kind } = frame;
    match kind {
        Kind::Ping(payload) => shared.send(Frame::new(0, Kind::Pong(payload))),
        Kind::Pong(_) => {}
        Kind::Open(bytes) => {
            let known = shared
                .streams
                .lock()
                .expect("not poisoned")
                .contains_key(&id);
            if side == Side::Opener || known || id == 0 {
                return refuse(shared, id, "this side does not accept that stream");
            }
            match Open::from_bytes(&bytes) {
                Ok(open) => {
                    // A connection closing meanwhile takes no stream.
                    if let Ok(stream) = shared.register(id) {
                        let _ = accept.send(Accepted { open, stream });
                    }
                }
                Err(why) => refuse(shared, id, &why),
            }
        }
        Kind::Credit(n) => {
            if let Some(entry) = shared.streams.lock().expect("not poisoned").get(&id) {
                entry.send_credit.add_permits(n as usize);
            }
        }
        Kind::Close(reason) => {
            let entry = shared.streams.lock().expect("not poisoned").remove(&id);
            if let Some(entry) = entry {
                entry.send_credit.close();
                let _ = entry.inbound.send(Kind::Close(reason));
            }
        }
        kind => {
            let n = kind.data_len();
            let over = {
                let streams = shared.streams.lock().expect("not poisoned");
                match streams.get(&id) {
                    None => None,
                    Some(entry) => {
                        let held = entry.unacknowledged.fetch_add(n, Ordering::SeqCst) + n;
                        if held > WINDOW {
                            Some(true)
                        } else {
                            let _ = entry.inbound.send(kind);
                            Some(false)
                        }
                    }
                }
            };
            match over {
                // A stream this side forgot: the peer learns it is closed.
                None => shared.send(Frame::new(id, Kind::Close(String::new()))),
                Some(true) => refuse(shared, id, "data sent past its credit"),
                Some(false) => {}
            }
        }
    }
}
