//! `corral server --config FILE`: the file's keys are the flags' names; a flag given on the
//! command line wins over the file; an unknown key is refused, naming the file and the key.
mod common;

use common::{start_manager, text, CORRAL};

#[test]
fn the_server_reads_its_settings_from_a_file_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("from-file");
    let file = dir.path().join("server.toml");
    std::fs::write(
        &file,
        format!(
            "# every flag has a key\ndata_dir = {:?}\nlisten = \"192.0.2.1:8470\"\n\
             retention_secs = 3600\ntick_secs = 1.5\nlost_after_secs = 20\n",
            data.to_str().unwrap()
        ),
    )
    .unwrap();
    // The data directory comes from the file (the manager writes its token there); the listen
    // address from the flag start_manager adds (the file's is not on this host: binding it
    // would fail).
    let _manager = start_manager(&data, &[], || {
        let mut c = std::process::Command::new(CORRAL);
        c.arg("server").arg("--config").arg(&file);
        c
    });
    assert!(data.join("admin.token").exists());

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "lisen = \"127.0.0.1:1\"\n").unwrap();
    let out = std::process::Command::new(CORRAL)
        .args(["server", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("bad.toml") && err.contains("\"lisen\""),
        "{err}"
    );
    assert!(err.contains("listen") && err.contains("data_dir"), "{err}");
}

/// `--log-format json` writes one JSON object per line; the text format has no colour codes
/// when standard error is not a terminal (here, a pipe).
#[test]
fn daemons_log_json_on_request_and_no_colour_into_a_pipe() {
    use std::io::BufRead;
    for format in ["json", "text"] {
        let dir = tempfile::tempdir().unwrap();
        let mut server = common::Proc(
            std::process::Command::new(CORRAL)
                .args(["server", "--log-format", format, "--listen"])
                .arg(format!("127.0.0.1:{}", common::free_port()))
                .arg("--data-dir")
                .arg(dir.path().join("data"))
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut first = String::new();
        std::io::BufReader::new(server.0.stderr.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(!first.contains('\u{1b}'), "{format}: {first:?}");
        let parsed = serde_json::from_str::<serde_json::Value>(&first);
        if format == "json" {
            let line = parsed.unwrap();
            assert_eq!(line["level"], "INFO", "{first}");
            assert!(line["fields"]["message"].is_string(), "{first}");
        } else {
            assert!(parsed.is_err() && first.contains(" INFO "), "{first}");
        }
    }
}
