//! One stream of a tunnel, as its user sees it: frames in, frames out, under flow control.
//! Each side may have at most [`WINDOW`] bytes of data in flight towards the other on a
//! stream; the receiver grants more (`credit`) as its user takes what arrived, so a slow
//! reader slows its own stream's sender and no other stream.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, Semaphore};

use crate::frame::{Frame, Kind};
use crate::mux::Shared;

/// The bytes of data a sender may have in flight on one stream.
pub const WINDOW: usize = 1 << 20;
/// The largest data frame (larger sends are cut).
pub const MAX_CHUNK: usize = 64 << 10;
/// Credit is granted back once this much was taken.
const GRANT_AT: usize = WINDOW / 4;

/// The tunnel is gone, or the stream was closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the stream is closed")]
pub struct Closed;

/// What both halves of a stream share; the last half dropped closes the stream.
pub(crate) struct StreamState {
    pub(crate) id: u32,
    pub(crate) shared: Arc<Shared>,
    /// Bytes this side may still send.
    pub(crate) send_credit: Arc<Semaphore>,
    /// Data received and not yet granted back (the peer may not exceed [`WINDOW`]).
    pub(crate) unacknowledged: Arc<AtomicUsize>,
    closed: AtomicBool,
}

impl StreamState {
    pub(crate) fn new(
        id: u32,
        shared: Arc<Shared>,
        send_credit: Arc<Semaphore>,
        unacknowledged: Arc<AtomicUsize>,
    ) -> StreamState {
        StreamState {
            id,
            shared,
            send_credit,
            unacknowledged,
            closed: AtomicBool::new(false),
        }
    }

    /// Forgets the stream, and sends `close` unless the peer closed it first (which closes
    /// `send_credit`).
    fn close(&self, reason: &str) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.shared.forget(self.id);
        if !self.send_credit.is_closed() {
            self.send_credit.close();
            self.shared
                .send(Frame::new(self.id, Kind::Close(reason.to_string())));
        }
    }

    fn is_closed(&self) -> bool {
        self.send_credit.is_closed() || self.shared.is_closed()
    }
}

impl Drop for StreamState {
    fn drop(&mut self) {
        self.close("");
    }
}

/// A stream: receive with [`Stream::recv`], send with [`Stream::send`], or split it to do both
/// from two tasks.
pub struct Stream {
    pub(crate) reader: StreamReader,
    pub(crate) writer: StreamWriter,
}

/// The receiving half.
pub struct StreamReader {
    pub(crate) state: Arc<StreamState>,
    pub(crate) inbound: mpsc::UnboundedReceiver<Kind>,
    /// Taken since credit was last granted.
    taken: usize,
}

/// The sending half; clones send on the same stream.
#[derive(Clone)]
pub struct StreamWriter {
    pub(crate) state: Arc<StreamState>,
}

impl Stream {
    pub(crate) fn new(state: StreamState, inbound: mpsc::UnboundedReceiver<Kind>) -> Stream {
        let state = Arc::new(state);
        Stream {
            reader: StreamReader {
                state: state.clone(),
                inbound,
                taken: 0,
            },
            writer: StreamWriter { state },
        }
    }

    pub fn id(&self) -> u32 {
        self.writer.state.id
    }

    pub async fn recv(&mut self) -> Option<Kind> {
        self.reader.recv().await
    }

    pub async fn send(&self, kind: Kind) -> Result<(), Closed> {
        self.writer.send(kind).await
    }

    /// Ends the stream with a reason (empty when all went well).
    pub fn close(&self, reason: &str) {
        self.writer.close(reason);
    }

    pub fn split(self) -> (StreamReader, StreamWriter) {
        (self.reader, self.writer)
    }
}

impl StreamReader {
    /// The next frame from the peer; `None` once the stream or the tunnel is gone (a `close`
    /// frame is returned first when the peer sent one).
    pub async fn recv(&mut self) -> Option<Kind> {
        let kind = self.inbound.recv().await?;
        let n = kind.data_len();
        if n > 0 {
            self.taken += n;
            if self.taken >= GRANT_AT {
                let granted = std::mem::take(&mut self.taken);
                self.state
                    .unacknowledged
                    .fetch_sub(granted, Ordering::SeqCst);
                self.state
                    .shared
                    .send(Frame::new(self.state.id, Kind::Credit(granted as u32)));
            }
        }
        Some(kind)
    }
}

impl StreamWriter {
    /// Sends a frame; data waits for credit, and is cut into frames of at most [`MAX_CHUNK`].
    pub async fn send(&self, kind: Kind) -> Result<(), Closed> {
        let state = &self.state;
        if state.is_closed() {
            return Err(Closed);
        }
        match kind {
            Kind::Data(bytes) => self.send_data(bytes, Kind::Data).await,
            Kind::Stderr(bytes) => self.send_data(bytes, Kind::Stderr).await,
            Kind::Close(reason) => {
                state.close(&reason);
                Ok(())
            }
            other => {
                state.shared.send(Frame::new(state.id, other));
                Ok(())
            }
        }
    }

    async fn send_data(&self, mut bytes: Bytes, make: fn(Bytes) -> Kind) -> Result<(), Closed> {
        while !bytes.is_empty() {
            let chunk = bytes.split_to(bytes.len().min(MAX_CHUNK));
            let permits = self
                .state
                .send_credit
                .acquire_many(chunk.len() as u32)
                .await
                .map_err(|_| Closed)?;
            permits.forget();
            self.state
                .shared
                .send(Frame::new(self.state.id, make(chunk)));
        }
        Ok(())
    }

    /// Ends the stream with a reason (empty when all went well).
    pub fn close(&self, reason: &str) {
        self.state.close(reason);
    }
}
