//! `process.rs`'s unit tests: pid files written and read back, old ones without a cookie too.

use super::*;

#[test]
fn pid_files_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(PID_FILE);
    let record = ProcessRecord {
        pid: 42,
        start_time: 7,
        cgroup: Some("/sys/fs/cgroup/corral-a".into()),
        cookie: Some("c00c1e".into()),
        uid: None,
        sandboxed: Some(false),
    };
    write_record(&path, &record).unwrap();
    assert_eq!(read_record(&path), Some(record.clone()));
    // Records written before cookies still read.
    fs::write(&path, r#"{"pid": 42, "start_time": 7, "cgroup": null}"#).unwrap();
    assert_eq!(
        read_record(&path),
        Some(ProcessRecord {
            cgroup: None,
            cookie: None,
            sandboxed: None,
            ..record
        })
    );
    fs::write(&path, "not json").unwrap();
    assert_eq!(read_record(&path), None);
}
