//! The messages of one WebSocket to a session (`session exec`, `shell`, `port-forward`): each
//! binary message is one tunnel frame's kind without a stream id (corral_tunnel::frame); input
//! goes out in chunks of at most 64 KiB, in the order read, then its end.

use corral_api::websocket::Message;
use corral_tunnel::{Kind, MAX_CHUNK};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Why a socket ended without the manager's `Close`.
pub(super) const LOST: &str = "the connection to the session was lost";

/// What one message from the manager says.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Incoming {
    Kind(Kind),
    /// Nothing to act on: a WebSocket ping or pong (tungstenite answers pings), or text.
    Skip,
    /// The socket ended (closed, failed, or a WebSocket close).
    End,
}

/// The message that carries `kind`.
pub(super) fn message(kind: &Kind) -> Message {
    Message::Binary(kind.encode())
}

/// Reads the next message of a socket; one that is no frame closes the stream with why.
pub(super) fn incoming<E>(next: Option<Result<Message, E>>) -> Incoming {
    match next {
        Some(Ok(Message::Binary(bytes))) => match Kind::decode(bytes) {
            Ok(kind) => Incoming::Kind(kind),
            Err(e) => Incoming::Kind(Kind::Close(format!("a bad message from the manager: {e}"))),
        },
        Some(Ok(Message::Close(_))) | Some(Err(_)) | None => Incoming::End,
        Some(Ok(_)) => Incoming::Skip,
    }
}

/// A buffer for [`read_chunk`]: one chunk, the most held at a time.
pub(super) fn chunk_buffer() -> Vec<u8> {
    vec![0; MAX_CHUNK]
}

/// The next message of input read from `reader` into `buf`: `Data` of what one read gave (at
/// most the buffer, 64 KiB), `Eof` at its end, `Close` with why a read failed. Every kind but
/// `Data` is the last.
pub(super) async fn read_chunk<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut [u8],
    what: &str,
) -> Kind {
    match reader.read(buf).await {
        Ok(0) => Kind::Eof,
        Ok(n) => Kind::Data(buf[..n].to_vec().into()),
        Err(e) => Kind::Close(format!("reading {what}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn input_goes_out_in_chunks_of_at_most_64_kib_then_its_end() {
        let input: Vec<u8> = (0..150 * 1024).map(|i| (i % 251) as u8).collect();
        let mut reader = &input[..];
        let mut buf = chunk_buffer();
        let mut sent = Vec::new();
        let mut sizes = Vec::new();
        loop {
            match read_chunk(&mut reader, &mut buf, "standard input").await {
                Kind::Data(bytes) => {
                    sizes.push(bytes.len());
                    sent.extend_from_slice(&bytes);
                }
                other => {
                    assert_eq!(other, Kind::Eof);
                    break;
                }
            }
        }
        assert_eq!(sizes, [64 * 1024, 64 * 1024, 22 * 1024]);
        assert_eq!(sent, input, "every byte, in order");
    }

    #[tokio::test]
    async fn a_failed_read_closes_with_why() {
        struct Broken;
        impl AsyncRead for Broken {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                _: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::task::Poll::Ready(Err(std::io::Error::other("disk on fire")))
            }
        }
        let kind = read_chunk(&mut Broken, &mut chunk_buffer(), "standard input").await;
        assert_eq!(
            kind,
            Kind::Close("reading standard input: disk on fire".into())
        );
    }

    #[test]
    fn messages_are_frames_pings_are_skipped_and_the_end_is_the_end() {
        let data = Kind::Data(b"hi".to_vec().into());
        let next = |m: Message| incoming::<()>(Some(Ok(m)));
        assert_eq!(next(message(&data)), Incoming::Kind(data));
        assert_eq!(next(Message::Ping(vec![1].into())), Incoming::Skip);
        assert_eq!(next(Message::Close(None)), Incoming::End);
        assert_eq!(incoming::<()>(Some(Err(()))), Incoming::End);
        assert_eq!(incoming::<()>(None), Incoming::End);
        match next(Message::Binary(vec![200].into())) {
            Incoming::Kind(Kind::Close(why)) => assert!(why.starts_with("a bad message"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
