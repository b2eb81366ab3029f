//! The agent sync protocol: what a peer sends either way deserialises without panicking, and
//! what deserialises serialises back to the same value.
#![no_main]

use corral_api::protocol::{JoinRequest, JoinResponse, SyncRequest, SyncResponse};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;

fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<T>(data) {
        let json = serde_json::to_vec(&value).unwrap();
        let back: T = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, value, "{}", String::from_utf8_lossy(&json));
    }
}

fuzz_target!(|data: &[u8]| {
    round_trip::<JoinRequest>(data);
    round_trip::<JoinResponse>(data);
    round_trip::<SyncRequest>(data);
    round_trip::<SyncResponse>(data);
});
