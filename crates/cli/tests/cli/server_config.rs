//! `corral server --config FILE`: the file's keys are the flags' names; a flag given on the
//! command line wins over the file; an unknown key is refused, naming the file and the key. A
//! second server on one SQLite data directory is refused, naming the first.
use crate::common;

use std::time::Duration;

use common::{eventually, free_port, start_manager, text, Cluster, Proc, CORRAL};

#[test]
fn a_second_server_on_the_same_data_directory_is_refused_naming_the_first() {
    let c = Cluster::start(30);
    let data = c.dir.path().join("data");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut second = Proc(
        std::process::Command::new(CORRAL)
            .args(["server", "--data-dir"])
            .arg(&data)
            .args(["--listen", &listen])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // (Were it let in, it would serve on: the wait fails, and dropping it kills it.)
    let status = eventually("the second server to stop", Duration::from_secs(10), || {
        second.0.try_wait().unwrap()
    });
    assert!(!status.success());
    let mut stderr = String::new();
    let mut pipe = second.0.stderr.take().unwrap();
    std::io::Read::read_to_string(&mut pipe, &mut stderr).unwrap();
    let first = c.server.as_ref().unwrap().0.id();
    assert!(
        stderr.contains(&format!(
            "another manager (pid {first}) runs on this data directory"
        )),
        "{stderr}"
    );
    // The first goes on serving.
    assert!(c.cli(&["group", "ls"]).status.success());
}

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
