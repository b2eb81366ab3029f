//! `corral plan` files: parsing, validation and a pass of the cycle never panic, whatever the
//! file holds, and the output serialises.
#![no_main]

use corral_core::plan::{plan, Problem};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(problem) = serde_json::from_slice::<Problem>(data) else {
        return;
    };
    let Ok(snapshot) = problem.into_snapshot() else {
        return;
    };
    let out = plan(&snapshot);
    serde_json::to_string(&out).unwrap();
});
