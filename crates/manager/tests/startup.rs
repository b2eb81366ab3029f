//! Starting the manager on a data directory as operators find it: a damaged, locked or emptied
//! database, files others could read, provider secrets at rest.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::Manager;
use corral_manager::{start, Config};
use reqwest::StatusCode;

/// Names the database file the child process `lock_holder` locks.
const HOLD_LOCK: &str = "CORRAL_TEST_HOLD_LOCK";
/// What `lock_holder` says once it holds the lock.
const LOCKED: &str = "holding the lock";

fn config(data_dir: &Path) -> Config {
    Config {
        data_dir: data_dir.to_path_buf(),
        listen: "127.0.0.1:0".parse().unwrap(),
        tick: Duration::from_millis(200),
        ..Config::default()
    }
}

async fn start_error(data_dir: &Path) -> String {
    match start(&config(data_dir)).await {
        Ok(_) => panic!("the manager started on {}", data_dir.display()),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn a_damaged_database_is_named_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let db = data.join("corral.db");
    // Bytes no SQLite file starts with.
    let junk: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&db, &junk).unwrap();

    let e = start_error(&data).await;
    assert!(e.contains(&db.display().to_string()), "{e}");
    assert!(e.contains("not a SQLite database"), "{e}");
    assert!(e.contains("file is not a database"), "{e}");
    assert_eq!(
        std::fs::read(&db).unwrap(),
        junk,
        "the file is left as it was"
    );
}

/// A child process holding a database's exclusive lock until it is dropped.
struct LockHolder(Child);

impl LockHolder {
    fn lock(db: &Path) -> LockHolder {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["lock_holder", "--exact", "--nocapture", "--test-threads=1"])
            .env(HOLD_LOCK, db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut holder = LockHolder(child);
        for line in out.lines() {
            // libtest has written "test lock_holder ... " on that line before.
            if line.unwrap().ends_with(LOCKED) {
                return holder;
            }
        }
        let status = holder.0.wait().unwrap();
        panic!("the lock holder ended without taking the lock: {status}");
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Not a test of its own: the child process of `a_locked_database_is_named`. Holds an
/// exclusive lock on the database `CORRAL_TEST_HOLD_LOCK` names until its input closes.
#[tokio::test]
async fn lock_holder() {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
    use sqlx::{Connection, Executor};
    let Some(db) = std::env::var_os(HOLD_LOCK) else {
        return;
    };
    let options = SqliteConnectOptions::new()
        .filename(db)
        .create_if_missing(true);
    let mut conn = SqliteConnection::connect_with(&options).await.unwrap();
    conn.execute("PRAGMA journal_mode = WAL").await.unwrap();
    conn.execute("BEGIN EXCLUSIVE").await.unwrap();
    println!("{LOCKED}");
    tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new()))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_locked_database_is_named_within_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let db = data.join("corral.db");
    let _holder = LockHolder::lock(&db);

    // Said after the few seconds opening waits for a lock, not as the pool's "pool timed out"
    // after 30.
    let e = start_error(&data).await;
    assert!(e.contains(&db.display().to_string()), "{e}");
    assert!(e.contains("locked by another process"), "{e}");
}

/// An emptied or lost database is not a new install: the admin token people hold stays, and
/// the manager says what is wrong instead of starting on an empty database.
#[tokio::test]
async fn an_admin_token_without_its_database_refuses_to_start() {
    for empty_file in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let token = data.join("admin.token");
        std::fs::write(&token, "the-token-people-hold\n").unwrap();
        if empty_file {
            std::fs::write(data.join("corral.db"), "").unwrap();
        }

        let e = start_error(&data).await;
        assert!(
            e.contains(&format!(
                "{} exists but the database has no tokens",
                token.display()
            )),
            "{e}"
        );
        assert!(e.contains("move admin.token away"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&token).unwrap(),
            "the-token-people-hold\n"
        );
        // And again: nothing the refused start did lets the next one through.
        start_error(&data).await;
        assert_eq!(
            std::fs::read_to_string(&token).unwrap(),
            "the-token-people-hold\n"
        );
    }
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The data directory holds the database (with provider secrets and token hashes), the admin
/// token and the secrets key: only its owner can read any of it, also when an older version
/// left it open to others.
#[cfg(unix)]
#[tokio::test]
async fn the_data_directory_and_its_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let files = ["corral.db", "corral.db-wal", "admin.token", "secrets.key"];

    let app = start(&config(&data)).await.unwrap();
    assert_eq!(mode(&data), 0o700);
    for file in files {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }

    // As an older version left them, with the database still open.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    for file in ["corral.db", "corral.db-wal", "corral.db-shm"] {
        std::fs::set_permissions(data.join(file), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let _second = start(&config(&data)).await.unwrap();
    assert_eq!(mode(&data), 0o700);
    for file in files.iter().chain(&["corral.db-shm"]) {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    drop(app);
}

/// Whether `needle` occurs in the file's raw bytes (a missing file holds nothing).
fn file_holds(path: &Path, needle: &str) -> bool {
    let bytes = std::fs::read(path).unwrap_or_default();
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn database_holds(data: &Path, needle: &str) -> bool {
    ["corral.db", "corral.db-wal"]
        .iter()
        .any(|f| file_holds(&data.join(f), needle))
}

/// An exec plugin that writes the `API_KEY` it was given to `seen` and offers no templates.
fn plugin(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let seen = dir.join("seen");
    let plugin = dir.join("plugin.sh");
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\nprintf '%s' \"$API_KEY\" > {}.tmp && mv {0}.tmp {0}\ncat > /dev/null\n\
             echo '{{\"templates\": []}}'\n",
            seen.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    (plugin, seen)
}

/// What the plugin was given, once it ran (the driver connects within a second).
async fn wait_seen(seen: &Path) -> String {
    corral_testkit::eventually_async("the plugin to run", Duration::from_secs(20), || {
        std::future::ready(std::fs::read_to_string(seen))
    })
    .await
}

const SECRET: &str = "s3cret-vendor-key-8472";

/// A provider secret given through the API is stored sealed: it is nowhere in the database
/// file or its WAL, and the group's driver still hands the plugin the real value.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_secrets_are_sealed_at_rest_and_reach_the_provider() {
    let m = Manager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let (plugin, seen) = plugin(dir.path());
    let body = serde_json::json!({
        "name": "cloud",
        "provider": {"name": "exec", "options": {"command": plugin, "secret_env": {"API_KEY": SECRET}}},
    });
    let r = m.post("/api/v1/groups", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);

    assert_eq!(wait_seen(&seen).await, SECRET);
    let stored = m.store.get_group_provider("cloud").await.unwrap().unwrap();
    assert!(stored.contains("\"API_KEY\":\"enc:v1:"), "{stored}");
    assert!(!database_holds(&m.config.data_dir, SECRET));
    // Sent back redacted, it keeps its value.
    let shown = m.get("/api/v1/groups/cloud/provider").await.body;
    assert_eq!(shown["options"]["secret_env"]["API_KEY"], "********");
    let r = m
        .put("/api/v1/groups/cloud/provider", &shown.to_string())
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    std::fs::remove_file(&seen).unwrap();
    assert_eq!(wait_seen(&seen).await, SECRET);
    assert!(!database_holds(&m.config.data_dir, SECRET));
}

/// Secrets an older version stored in plain text are sealed in place at start (and gone from
/// the files), and still reach the provider. A key made afresh cannot open them once sealed:
/// the manager refuses to start rather than run with a key other managers do not share.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_secrets_are_sealed_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (plugin, seen) = plugin(dir.path());
    {
        let store = corral_store::Store::open_sqlite_dir(&data).await.unwrap();
        let group = corral_core::ScalingGroup {
            name: "old".into(),
            policy: Default::default(),
            scheduler: Default::default(),
            templates: Vec::new(),
        };
        let provider = serde_json::json!({"name": "exec", "options": {
            "command": plugin, "secret_env": {"API_KEY": SECRET}}});
        store
            .create_group_with_provider(&group, Some(&provider.to_string()), corral_manager::now())
            .await
            .unwrap();
        store.close().await;
    }
    assert!(
        database_holds(&data, SECRET),
        "the older version's plaintext"
    );

    let app = start(&config(&data)).await.unwrap();
    let stored = app.store.get_group_provider("old").await.unwrap().unwrap();
    assert!(stored.contains("\"API_KEY\":\"enc:v1:"), "{stored}");
    assert!(!database_holds(&data, SECRET));
    assert_eq!(wait_seen(&seen).await, SECRET);

    // The key is lost: a new one would be made, which cannot open what the old one sealed.
    std::fs::remove_file(data.join("secrets.key")).unwrap();
    let e = start_error(&data).await;
    assert!(
        e.contains("group \"old\": provider option secret_env.API_KEY"),
        "{e}"
    );
    assert!(e.contains("sealed with another secrets key"), "{e}");
    assert!(
        !data.join("secrets.key").exists(),
        "the new key is not kept"
    );
    drop(app);
}
