//! Whatever an exec plugin prints and however it exits, reading its answer never panics, and
//! answers that follow docs/plugins.md are read back. The same entry point is fuzzed by
//! `fuzz/fuzz_targets/exec_answer.rs` (`cargo fuzz run --features exec exec_answer`); this
//! bounded property test is what CI runs, as building the fuzz target with this crate takes
//! minutes.

use corral_provider::exec::fuzz_plugin_answer;
use corral_provider::ErrorClass;
use proptest::prelude::*;

const OPS: [&str; 4] = ["templates", "launch", "terminate", "list"];

/// JSON-ish text: the pieces plugin answers are made of, in any order.
fn jsonish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(":".to_string()),
        Just(",".to_string()),
        Just("\"templates\"".to_string()),
        Just("\"instances\"".to_string()),
        Just("\"name\"".to_string()),
        Just("\"slots\"".to_string()),
        Just("\"price_per_hour\"".to_string()),
        Just("\"id\"".to_string()),
        Just("\"agent_id\"".to_string()),
        Just("\"template\"".to_string()),
        Just("\"state\"".to_string()),
        Just("\"running\"".to_string()),
        Just("\"gone\"".to_string()),
        Just("\"error\"".to_string()),
        Just("\"class\"".to_string()),
        Just("\"message\"".to_string()),
        Just("\"capacity\"".to_string()),
        Just("\"a-1\"".to_string()),
        Just("\"small\"".to_string()),
        Just("\"cpu=2,mem=4GiB\"".to_string()),
        Just("null".to_string()),
        Just("-1e400".to_string()),
        "[ -~]{0,8}",
        any::<f64>().prop_map(|f| f.to_string()),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_output_is_read_without_panicking(
        op in 0..4usize,
        code in 0..3i32,
        stdout in prop_oneof![jsonish().prop_map(String::into_bytes), proptest::collection::vec(any::<u8>(), 0..64)],
        stderr in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let _ = fuzz_plugin_answer(OPS[op], code, &stdout, &stderr);
    }
}

#[test]
fn answers_that_follow_the_protocol_are_read() {
    let ok = |op: &str, out: &str| fuzz_plugin_answer(op, 0, out.as_bytes(), b"");
    assert_eq!(
        ok(
            "templates",
            r#"{"templates": [{"name": "small", "slots": "cpu=2"}, {"name": "big"}]}"#
        )
        .unwrap(),
        2
    );
    assert_eq!(
        ok("launch", r#"{"instances": [{"id": "i-1", "agent_id": "a-1", "template": "small", "state": "pending"}]}"#)
            .unwrap(),
        1
    );
    assert_eq!(ok("terminate", "{}").unwrap(), 0);
    assert_eq!(ok("list", r#" {"instances": []} "#).unwrap(), 0);
    // Launched agents that were not asked for, twice-listed ids, garbage: transient failures.
    for (op, out) in [
        (
            "launch",
            r#"{"instances": [{"id": "i-1", "agent_id": "a-2", "state": "pending"}]}"#,
        ),
        (
            "list",
            r#"{"instances": [{"id": "i", "state": "gone"}, {"id": "i", "state": "gone"}]}"#,
        ),
        (
            "templates",
            r#"{"templates": [{"name": "x", "slots": "cpu=-1"}]}"#,
        ),
        ("list", "not json"),
        ("list", r#"{"instances": []} {}"#),
    ] {
        let e = ok(op, out).unwrap_err();
        assert_eq!(e.class, ErrorClass::Transient, "{op} {out}: {e}");
    }
    let e = fuzz_plugin_answer(
        "list",
        1,
        br#"{"error": {"class": "capacity", "message": "full"}}"#,
        b"",
    )
    .unwrap_err();
    assert_eq!(e.class, ErrorClass::Capacity);
}
