//! The store when its file system or its file fails it: a full disk, a damaged database file,
//! files others could read.

mod common;

use corral_store::{InstancePhase, SessionFilter, Store, StoreError};

use common::*;

/// A session with a big spec, so that a few fill pages.
async fn insert_padded(store: &Store, id: &str, i: i64) -> Result<(), StoreError> {
    let pad = serde_json::json!({"pad": "x".repeat(3000)});
    store
        .insert_session(&session(id, "g", "ann", "cpu=1", i), &pad, t(i))
        .await
}

/// A full disk fails the writes that need room, and only while it is full: once there is room
/// again, submits and registrations go through on SQLite's one writer connection, with no
/// restart. (SQLite's max_page_count fails writes with SQLITE_FULL, "database or disk is full",
/// exactly as a full disk does.) The health check says so meanwhile.
#[tokio::test]
async fn sqlite_writes_work_again_once_the_disk_has_room() {
    let db = Db::sqlite().await;
    let s = &db.store;
    s.create_group(&group("g"), t(1)).await.unwrap();
    s.check_writable(t(1)).await.unwrap();

    // The database may not grow past its size: fill it until a write finds no room.
    s.sqlite_max_pages_for_test(Some(1)).await.unwrap();
    let mut stored = 0;
    let full = loop {
        match insert_padded(s, &format!("s{stored}"), stored).await {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 1000, "the cap never filled the database");
    };
    assert!(full.to_string().contains("full"), "{full}");

    // Still full: writes fail for want of room, not because an earlier failure broke the
    // connection; the health check says the store cannot write.
    for i in 0..3 {
        let e = insert_padded(s, &format!("again{i}"), i).await.unwrap_err();
        assert!(e.to_string().contains("full"), "{e}");
    }
    let e = s.check_writable(t(2)).await.unwrap_err();
    assert!(e.to_string().contains("full"), "{e}");

    // Room again: the next writes go through.
    s.sqlite_max_pages_for_test(None).await.unwrap();
    insert_padded(s, "after", 1).await.unwrap();
    s.upsert_agent(&agent("a1", "g", "cpu=2"), t(3))
        .await
        .unwrap();
    s.check_writable(t(4)).await.unwrap();
    let sessions = s.list_sessions(&SessionFilter::default()).await.unwrap();
    assert_eq!(sessions.len(), stored as usize + 1);
    assert!(s.get_agent("a1").await.unwrap().is_some());
}

on_both!(the_health_check_commits_a_write, |db| {
    db.store.check_writable(t(5)).await.unwrap();
    db.reopen().await;
    db.store.check_writable(t(6)).await.unwrap();
});

/// A damaged file or one another process holds is named when the store opens, at once, rather
/// than as a pool that timed out.
#[tokio::test]
async fn opening_a_damaged_file_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("corral.db");
    std::fs::write(&db, vec![7u8; 4096]).unwrap();
    let e = Store::open_sqlite_dir(dir.path()).await.unwrap_err();
    assert!(matches!(e, StoreError::NotADatabase { .. }), "{e}");
    assert!(e.to_string().contains(&db.display().to_string()), "{e}");
}

/// The database file and its WAL are readable by their owner only.
#[cfg(unix)]
#[tokio::test]
async fn sqlite_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = Store::open_sqlite_dir(&data).await.unwrap();
    store.create_group(&group("g"), t(1)).await.unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    for f in ["corral.db", "corral.db-wal", "corral.db-shm"] {
        assert_eq!(mode(&data.join(f)), 0o600, "{f}");
    }
}

// Callers cancelled at every point of their reads and writes (clients that went away): no
// connection goes back to the pool inside a transaction, so every later call works. Before
// transactions were begun in a task of their own, PostgreSQL's pool handed out connections left
// in a READ ONLY transaction ("cannot execute UPDATE in a read-only transaction").
on_both!(callers_cancelled_midway_leave_no_transaction_open, |db| {
    let s = &db.store;
    s.create_group(&group("g"), t(1)).await.unwrap();
    // Each call is cancelled after the runtime ran a little more of it each time: some while
    // they wait for BEGIN's answer.
    for turns in 0..600 {
        let calls = [
            tokio::spawn({
                let s = s.clone();
                async move { s.list_instances("g", &InstancePhase::ALL).await.map(drop) }
            }),
            tokio::spawn({
                let s = s.clone();
                async move { s.get_session("none").await.map(drop) }
            }),
        ];
        for _ in 0..turns % 60 {
            tokio::task::yield_now().await;
        }
        for call in calls {
            call.abort();
            let _ = call.await;
        }
        // A statement of its own, not a transaction (whose BEGIN and COMMIT would close one
        // left open).
        s.touch_agents(&[("none".into(), t(3))])
            .await
            .unwrap_or_else(|e| panic!("a write after {turns} turns: {e}"));
    }
});
