//! An exec plugin's answer (docs/plugins.md): whatever a plugin prints and however it exits,
//! reading the answer never panics. The first byte picks the operation and the exit code; the
//! rest is standard output, then standard error after the first NUL byte.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let op = ["templates", "launch", "terminate", "list"][usize::from(head & 3)];
    let code = i32::from(head >> 2 & 3);
    let (stdout, stderr) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let _ = corral_provider::exec::fuzz_plugin_answer(op, code, stdout, stderr);
});
