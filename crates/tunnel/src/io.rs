//! A stream as a byte pipe: [`bridge`] carries a stream's data frames to and from anything
//! that reads and writes bytes (a TCP connection at the agent), and [`into_io`] gives a stream
//! to code that wants such a thing (an HTTP client at the manager).

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::task::JoinHandle;

use crate::{Kind, Stream, MAX_CHUNK};

/// Carries `io` both ways over `stream`. Its end of reading is sent as `eof`; the peer's `eof`
/// shuts `io`'s writing side, and the stream ends once both sides ended. The peer's `close`
/// (or the tunnel's loss) drops `io` at once, so that a server taking one connection at a time
/// is not held by a peer who went away. Returns why the peer closed the stream, when it said.
pub async fn bridge<Io>(stream: Stream, io: Io) -> Option<String>
where
    Io: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut read, mut write) = tokio::io::split(io);
    let (mut from_peer, to_peer) = stream.split();
    let sender = to_peer.clone();
    let mut up = tokio::spawn(async move {
        let mut buf = vec![0u8; MAX_CHUNK / 2];
        loop {
            let n = match read.read(&mut buf).await {
                Ok(0) => {
                    let _ = sender.send(Kind::Eof).await;
                    return Ok(());
                }
                Ok(n) => n,
                Err(e) => return Err(format!("reading: {e}")),
            };
            let data = Kind::Data(Bytes::copy_from_slice(&buf[..n]));
            if sender.send(data).await.is_err() {
                return Ok(());
            }
        }
    });
    while let Some(kind) = from_peer.recv().await {
        match kind {
            Kind::Data(bytes) if write.write_all(&bytes).await.is_err() => break,
            Kind::Eof => {
                let _ = write.shutdown().await;
                let sent = (&mut up).await.unwrap_or(Ok(()));
                to_peer.close(&sent.err().unwrap_or_default());
                return None;
            }
            Kind::Close(why) => {
                up.abort();
                return Some(why).filter(|w| !w.is_empty());
            }
            _ => {}
        }
    }
    up.abort();
    None
}

/// One end of an in-memory pipe whose other end is bridged to `stream` by a task of its own,
/// which ends with the stream or when this end is dropped, saying why the peer closed it.
pub fn into_io(stream: Stream) -> (DuplexStream, JoinHandle<Option<String>>) {
    let (near, far) = tokio::io::duplex(2 * MAX_CHUNK);
    (near, tokio::spawn(bridge(stream, far)))
}
