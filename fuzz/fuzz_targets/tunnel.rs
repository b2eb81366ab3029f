//! The tunnel's frames, as a client or an agent may send them: any bytes decode or fail without
//! panicking, what decodes encodes to bytes that decode to the same frame, and an open frame's
//! JSON that reads writes back to the same purpose.
#![no_main]

use bytes::Bytes;
use corral_tunnel::{Frame, Kind, Open};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(frame) = Frame::decode(bytes.clone()) {
        assert_eq!(Frame::decode(frame.encode()), Ok(frame.clone()));
        if let Kind::Open(json) = &frame.kind {
            if let Ok(open) = Open::from_bytes(json) {
                assert_eq!(Open::from_bytes(&open.to_bytes()), Ok(open));
            }
        }
    }
    if let Ok(kind) = Kind::decode(bytes) {
        assert_eq!(Kind::decode(kind.encode()), Ok(kind));
    }
});
