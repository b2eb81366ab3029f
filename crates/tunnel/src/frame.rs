//! (pure) The tunnel's frames and their bytes. A frame on the agent's tunnel is
//! `stream: u32 (big-endian) · kind: u8 · payload`; a message between a user and the manager
//! (one stream per WebSocket) is the same without the stream id, so the manager relays
//! messages by adding or removing four bytes.
//!
//! | kind | name   | payload                                   | direction                  |
//! |------|--------|-------------------------------------------|----------------------------|
//! | 0    | open   | JSON [`Open`](crate::Open)                | manager → agent            |
//! | 1    | data   | bytes: stdin, stdout or a TCP stream's    | both                       |
//! | 2    | stderr | bytes of a command's standard error       | agent → manager → user     |
//! | 3    | eof    | none: the sender sends no more data       | both                       |
//! | 4    | close  | UTF-8 reason, empty when all went well    | both; ends the stream      |
//! | 5    | credit | u32: bytes the receiver takes on top      | tunnel only                |
//! | 6    | resize | u16 columns, u16 rows                     | user → agent               |
//! | 7    | exit   | i32: the command's exit code              | agent → user               |
//! | 8    | ping   | opaque, answered by a pong with the same  | tunnel only, stream 0      |
//! | 9    | pong   | the ping's payload                        | tunnel only, stream 0      |

use bytes::{BufMut, Bytes, BytesMut};

/// What one frame says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Opens the stream: the JSON of an [`Open`](crate::Open), kept as bytes so that a bad one
    /// closes that stream alone.
    Open(Bytes),
    Data(Bytes),
    Stderr(Bytes),
    Eof,
    /// The stream ends; the reason is empty when all went well.
    Close(String),
    Credit(u32),
    Resize {
        cols: u16,
        rows: u16,
    },
    Exit(i32),
    Ping(Bytes),
    Pong(Bytes),
}

/// A frame of the tunnel: a kind on a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub stream: u32,
    pub kind: Kind,
}

/// Why bytes are no frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a frame of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("a {kind} frame's payload of {len} bytes should be {expected}")]
    Payload {
        kind: &'static str,
        len: usize,
        expected: &'static str,
    },
    #[error("a close frame's reason is not UTF-8")]
    Reason,
}

impl Kind {
    fn code(&self) -> u8 {
        match self {
            Kind::Open(_) => 0,
            Kind::Data(_) => 1,
            Kind::Stderr(_) => 2,
            Kind::Eof => 3,
            Kind::Close(_) => 4,
            Kind::Credit(_) => 5,
            Kind::Resize { .. } => 6,
            Kind::Exit(_) => 7,
            Kind::Ping(_) => 8,
            Kind::Pong(_) => 9,
        }
    }

    /// The name people read in errors.
    pub fn name(&self) -> &'static str {
        [
            "open", "data", "stderr", "eof", "close", "credit", "resize", "exit", "ping", "pong",
        ][self.code() as usize]
    }

    /// The bytes of data this frame carries under flow control.
    pub fn data_len(&self) -> usize {
        match self {
            Kind::Data(b) | Kind::Stderr(b) => b.len(),
            _ => 0,
        }
    }

    fn put(&self, out: &mut BytesMut) {
        out.put_u8(self.code());
        match self {
            Kind::Open(b) | Kind::Data(b) | Kind::Stderr(b) | Kind::Ping(b) | Kind::Pong(b) => {
                out.put_slice(b)
            }
            Kind::Eof => {}
            Kind::Close(reason) => out.put_slice(reason.as_bytes()),
            Kind::Credit(n) => out.put_u32(*n),
            Kind::Resize { cols, rows } => {
                out.put_u16(*cols);
                out.put_u16(*rows);
            }
            Kind::Exit(code) => out.put_i32(*code),
        }
    }

    /// The bytes of a message between a user and the manager.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(1 + self.data_len().max(4));
        self.put(&mut out);
        out.freeze()
    }

    /// Reads a message between a user and the manager.
    pub fn decode(bytes: Bytes) -> Result<Kind, FrameError> {
        let Some(&code) = bytes.first() else {
            return Err(FrameError::Short(0));
        };
        let payload = bytes.slice(1..);
        let exact = |kind: &'static str, expected: &'static str, len: usize| {
            if payload.len() == len {
                Ok(())
            } else {
                Err(FrameError::Payload {
                    kind,
                    len: payload.len(),
                    expected,
                })
            }
        };
        Ok(match code {
            0 => Kind::Open(payload),
            1 => Kind::Data(payload),
            2 => Kind::Stderr(payload),
            3 => {
                exact("eof", "empty", 0)?;
                Kind::Eof
            }
            4 => Kind::Close(String::from_utf8(payload.to_vec()).map_err(|_| FrameError::Reason)?),
            5 => {
                exact("credit", "4 bytes", 4)?;
                Kind::Credit(u32::from_be_bytes(
                    payload[..4].try_into().expect("4 bytes"),
                ))
            }
            6 => {
                exact("resize", "4 bytes", 4)?;
                Kind::Resize {
                    cols: u16::from_be_bytes([payload[0], payload[1]]),
                    rows: u16::from_be_bytes([payload[2], payload[3]]),
                }
            }
            7 => {
                exact("exit", "4 bytes", 4)?;
                Kind::Exit(i32::from_be_bytes(
                    payload[..4].try_into().expect("4 bytes"),
                ))
            }
            8 => Kind::Ping(payload),
            9 => Kind::Pong(payload),
            other => return Err(FrameError::UnknownKind(other)),
        })
    }
}

impl Frame {
    pub fn new(stream: u32, kind: Kind) -> Frame {
        Frame { stream, kind }
    }

    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(5 + self.kind.data_len().max(4));
        out.put_u32(self.stream);
        self.kind.put(&mut out);
        out.freeze()
    }

    /// Reads a tunnel frame. A frame too short to name its stream is `Err((None, _))`; one
    /// that names it but is bad otherwise is `Err((Some(stream), _))`, so that only that
    /// stream is closed.
    pub fn decode(bytes: Bytes) -> Result<Frame, (Option<u32>, FrameError)> {
        if bytes.len() < 5 {
            return Err((None, FrameError::Short(bytes.len())));
        }
        let stream = u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes"));
        let kind = Kind::decode(bytes.slice(4..)).map_err(|e| (Some(stream), e))?;
        Ok(Frame { stream, kind })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kinds() -> impl Strategy<Value = Kind> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from);
        prop_oneof![
            bytes().prop_map(Kind::Open),
            bytes().prop_map(Kind::Data),
            bytes().prop_map(Kind::Stderr),
            Just(Kind::Eof),
            ".{0,20}".prop_map(Kind::Close),
            any::<u32>().prop_map(Kind::Credit),
            (any::<u16>(), any::<u16>()).prop_map(|(cols, rows)| Kind::Resize { cols, rows }),
            any::<i32>().prop_map(Kind::Exit),
            bytes().prop_map(Kind::Ping),
            bytes().prop_map(Kind::Pong),
        ]
    }

    proptest! {
        #[test]
        fn frames_read_back_as_written(stream in any::<u32>(), kind in kinds()) {
            let frame = Frame::new(stream, kind.clone());
            prop_assert_eq!(Frame::decode(frame.encode()), Ok(frame));
            prop_assert_eq!(Kind::decode(kind.encode()), Ok(kind));
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = Frame::decode(Bytes::from(bytes.clone()));
            let _ = Kind::decode(Bytes::from(bytes));
        }
    }

    #[test]
    fn a_bad_frame_names_its_stream_when_it_can() {
        assert_eq!(
            Frame::decode(Bytes::from_static(&[0, 0, 1])),
            Err((None, FrameError::Short(3)))
        );
        assert_eq!(
            Frame::decode(Bytes::from_static(&[0, 0, 0, 7, 42])),
            Err((Some(7), FrameError::UnknownKind(42)))
        );
        assert_eq!(
            Frame::decode(Bytes::from_static(&[0, 0, 0, 7, 5, 1])),
            Err((
                Some(7),
                FrameError::Payload {
                    kind: "credit",
                    len: 1,
                    expected: "4 bytes"
                }
            ))
        );
    }

    #[test]
    fn the_wire_form_is_the_documented_one() {
        let frame = Frame::new(258, Kind::Resize { cols: 80, rows: 24 });
        assert_eq!(&frame.encode()[..], &[0, 0, 1, 2, 6, 0, 80, 0, 24]);
        assert_eq!(&Kind::Exit(-1).encode()[..], &[7, 255, 255, 255, 255]);
    }
}
