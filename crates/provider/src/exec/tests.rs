//! `exec.rs`'s unit tests: the answer read strictly (one JSON object, error objects and their
//! class, a failed exit quoting standard error), short excerpts, secrets kept out of `Debug`.

use super::*;
use std::os::unix::process::ExitStatusExt;

fn output(code: i32, stdout: &str, stderr: &str) -> Output {
    Output {
        status: ExitStatus::from_raw(code << 8),
        stdout: Captured {
            bytes: stdout.into(),
            truncated: false,
        },
        stderr: Captured {
            bytes: stderr.into(),
            truncated: false,
        },
    }
}

#[test]
fn one_json_object_and_nothing_else() {
    assert!(single_json_object(b" {\"a\":1}\n").is_ok());
    for (bad, why) in [
        (&b""[..], "no response"),
        (b"  \n", "no response"),
        (b"hello", "not JSON"),
        (b"{\"a\":1} {\"b\":2}", "extra output"),
        (b"{\"a\":1}\nDone.", "extra output"),
        (b"[1]", "not a JSON object"),
    ] {
        let e = single_json_object(bad).unwrap_err();
        assert!(e.contains(why), "{bad:?}: {e}");
    }
}

#[test]
fn error_objects_keep_their_class_whatever_the_exit_status() {
    let e = interpret(
        "p",
        "launch",
        &output(
            1,
            r#"{"error":{"class":"capacity","message":"no room"}}"#,
            "",
        ),
    )
    .unwrap_err();
    assert_eq!(e.class, ErrorClass::Capacity);
    assert!(e.message.contains("no room"), "{e}");
    let e = interpret(
        "p",
        "list",
        &output(0, r#"{"error":{"class":"bad","message":"x"}}"#, ""),
    )
    .unwrap_err();
    assert_eq!(e.class, ErrorClass::Transient);
    assert!(e.message.contains("invalid error object"), "{e}");
}

#[test]
fn a_failed_exit_quotes_the_status_and_the_end_of_stderr() {
    let stderr: String = (1..=20).map(|i| format!("line {i}\n")).collect();
    let e = interpret("p", "list", &output(3, "", &stderr)).unwrap_err();
    assert_eq!(e.class, ErrorClass::Transient);
    assert!(e.message.contains("exit status: 3"), "{e}");
    assert!(
        e.message.contains("line 20") && !e.message.contains("line 2 |"),
        "{e}"
    );
}

#[test]
fn excerpts_are_short() {
    let long = "x".repeat(1000);
    assert!(excerpt(long.as_bytes()).chars().count() < EXCERPT_CHARS + 5);
}

#[test]
fn secrets_do_not_show_in_debug_output() {
    let options: Options = serde_json::from_value(serde_json::json!({
        "command": "/bin/true", "secret_env": {"API_KEY": "s3cret"}
    }))
    .unwrap();
    let shown = format!("{options:?}");
    assert!(
        shown.contains("API_KEY") && !shown.contains("s3cret"),
        "{shown}"
    );
}
