//! Corral's persistence: one interface over SQLite (the embedded default) and PostgreSQL.
//!
//! The database is the truth: every change is one transaction, so a crash loses no committed
//! write and leaves no half-applied pass. The cycle reads a group with [`Store::snapshot`] (one
//! consistent read) and writes its decisions with [`Store::apply`] (one transaction whose
//! guards fail with [`StoreError::Conflict`] if capacity changed since the snapshot).
//!
//! Both databases go through sqlx's `Any` driver with the same SQL (`$1` placeholders, which
//! SQLite accepts too); the differences are the migrations (one directory per database), how a
//! transaction begins, and row locks (`FOR UPDATE` on PostgreSQL; SQLite locks the whole file).

mod agent_builds;
mod agent_images;
mod agent_keys;
mod agents;
mod apply;
mod array_tail;
mod arrays;
mod batch;
mod catalog;
mod codec;
mod cycle;
mod error;
mod events;
mod files;
mod governors;
mod history;
mod instances;
mod leases;
mod managers;
mod registry_logins;
mod removed_agents;
mod retention;
mod sessions;
/// Fresh PostgreSQL databases, for tests of this crate and its users (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod tokens;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use corral_core::Timestamp;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{Any, AnyPool, AssertSqlSafe, Connection, Executor, SqlSafeStr, Transaction};

pub use agent_builds::UpdateStanding;
pub use agent_keys::Standing;
pub use agents::{Heard, Removed};
pub use apply::Applied;
pub use arrays::{ArrayCancel, ArrayFilter, ArrayRecord, NewArray};
pub use batch::BatchJobRecord;
pub use cycle::MAX_PENDING_PER_PASS;
pub use error::{Result, StoreError};
pub use events::{Event, EventFilter, NewEvent, Role, TokenRecord};
pub use files::{Appended, PIECE as FILE_PIECE};
pub use history::{HistoryRows, NodeSpan, StateChange};
pub use instances::{InstancePhase, InstanceRecord};
pub use leases::{Fence, Lease};
pub use managers::{Wake, Wakes};
pub use registry_logins::StoredLogin;
pub use retention::Pruned;
pub use sessions::{ArraySelect, HistoryEntry, SessionFilter, SessionRecord};

/// The migrations, embedded in the binary: (version, description, SQLite SQL, PostgreSQL SQL).
/// Listed by hand rather than with `sqlx::migrate!`, whose proc-macro would build the bundled
/// SQLite a second time; a test checks that every file in `migrations/` is listed here.
const MIGRATIONS: &[(i64, &str, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../migrations/sqlite/0001_init.sql"),
        include_str!("../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "exit_code",
        include_str!("../migrations/sqlite/0002_exit_code.sql"),
        include_str!("../migrations/postgres/0002_exit_code.sql"),
    ),
    (
        3,
        "activity",
        include_str!("../migrations/sqlite/0003_activity.sql"),
        include_str!("../migrations/postgres/0003_activity.sql"),
    ),
    (
        4,
        "bootstrap",
        include_str!("../migrations/sqlite/0004_bootstrap.sql"),
        include_str!("../migrations/postgres/0004_bootstrap.sql"),
    ),
    (
        5,
        "instances",
        include_str!("../migrations/sqlite/0005_instances.sql"),
        include_str!("../migrations/postgres/0005_instances.sql"),
    ),
    (
        6,
        "health",
        include_str!("../migrations/sqlite/0006_health.sql"),
        include_str!("../migrations/postgres/0006_health.sql"),
    ),
    (
        7,
        "batch",
        include_str!("../migrations/sqlite/0007_batch.sql"),
        include_str!("../migrations/postgres/0007_batch.sql"),
    ),
    (
        8,
        "batch_sessions",
        include_str!("../migrations/sqlite/0008_batch_sessions.sql"),
        include_str!("../migrations/postgres/0008_batch_sessions.sql"),
    ),
    (
        9,
        "history",
        include_str!("../migrations/sqlite/0009_history.sql"),
        include_str!("../migrations/postgres/0009_history.sql"),
    ),
    (
        10,
        "devices",
        include_str!("../migrations/sqlite/0010_devices.sql"),
        include_str!("../migrations/postgres/0010_devices.sql"),
    ),
    (
        11,
        "agent_keys",
        include_str!("../migrations/sqlite/0011_agent_keys.sql"),
        include_str!("../migrations/postgres/0011_agent_keys.sql"),
    ),
    (
        12,
        "agent_builds",
        include_str!("../migrations/sqlite/0012_agent_builds.sql"),
        include_str!("../migrations/postgres/0012_agent_builds.sql"),
    ),
    (
        13,
        "agent_images",
        include_str!("../migrations/sqlite/0013_agent_images.sql"),
        include_str!("../migrations/postgres/0013_agent_images.sql"),
    ),
    (
        14,
        "leases",
        include_str!("../migrations/sqlite/0014_leases.sql"),
        include_str!("../migrations/postgres/0014_leases.sql"),
    ),
    (
        15,
        "sessions_by_agent",
        include_str!("../migrations/sqlite/0015_sessions_by_agent.sql"),
        include_str!("../migrations/postgres/0015_sessions_by_agent.sql"),
    ),
    (
        16,
        "files",
        include_str!("../migrations/sqlite/0016_files.sql"),
        include_str!("../migrations/postgres/0016_files.sql"),
    ),
    (
        17,
        "token_succession",
        include_str!("../migrations/sqlite/0017_token_succession.sql"),
        include_str!("../migrations/postgres/0017_token_succession.sql"),
    ),
    (
        18,
        "arrays",
        include_str!("../migrations/sqlite/0018_arrays.sql"),
        include_str!("../migrations/postgres/0018_arrays.sql"),
    ),
    (
        19,
        "device_grants",
        include_str!("../migrations/sqlite/0019_device_grants.sql"),
        include_str!("../migrations/postgres/0019_device_grants.sql"),
    ),
    (
        20,
        "array_tails",
        include_str!("../migrations/sqlite/0020_array_tails.sql"),
        include_str!("../migrations/postgres/0020_array_tails.sql"),
    ),
    (
        21,
        "removed_agents",
        include_str!("../migrations/sqlite/0021_removed_agents.sql"),
        include_str!("../migrations/postgres/0021_removed_agents.sql"),
    ),
];

/// PostgreSQL ends a session idle this long within a transaction ([`Store::open_with`]): the
/// managers' default lease.
const DEFAULT_IDLE_IN_TRANSACTION: Duration = Duration::from_secs(5);

/// How long a SQLite connection waits for another process's write lock before failing.
const SQLITE_BUSY_TIMEOUT_MS: u32 = 10_000;

/// How long opening waits for another process's lock on the file: a manager writing to the
/// same file holds it for milliseconds, so longer means something holds it for good.
const SQLITE_OPEN_LOCK_WAIT: Duration = Duration::from_secs(5);

/// SQLite's primary result codes that opening tells apart.
const SQLITE_BUSY: u32 = 5;
const SQLITE_LOCKED: u32 = 6;
const SQLITE_CORRUPT: u32 = 11;
const SQLITE_NOTADB: u32 = 26;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The store. Cheap to clone: clones share the connection pools.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
    /// Reads outside write transactions (snapshots, lists).
    read: AnyPool,
    /// Write transactions. On SQLite this pool has one connection, so writers queue here in
    /// order instead of polling SQLite's file lock; on PostgreSQL it is the same pool as `read`.
    write: AnyPool,
    /// SQLite's `max_page_count` for every connection, 0 for none: tests stand in for a full
    /// disk with it (see [`Store::sqlite_max_pages_for_test`]).
    max_pages: Arc<AtomicU64>,
    /// Set on the store a group's owner runs its passes and driver with: every write
    /// transaction first checks that the lease is still this one ([`Store::fenced`]).
    fence: Option<Arc<Fence>>,
    /// PostgreSQL's URL, for the connection that listens to other managers' wakes.
    url: Option<Arc<str>>,
}

type Tx = Transaction<'static, Any>;

impl Store {
    /// Opens `sqlite://PATH` (created if missing) or `postgres://...`, and brings the schema up
    /// to date.
    pub async fn open(url: &str) -> Result<Store> {
        Self::open_with(url, DEFAULT_IDLE_IN_TRANSACTION).await
    }

    /// [`Store::open`], PostgreSQL's server ending any of this store's sessions that waits
    /// longer than `idle_in_transaction` for its next statement within a transaction (rolled
    /// back, its locks let go). A manager paused or cut off in the middle of a fenced write
    /// holds its group's lease row locked; with its lease as this limit, another manager takes
    /// the group over within twice the lease. Nothing on SQLite, which has one manager.
    pub async fn open_with(url: &str, idle_in_transaction: Duration) -> Result<Store> {
        sqlx::any::install_default_drivers();
        let store = if url.starts_with("sqlite:") {
            Self::open_sqlite(url).await?
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Self::open_postgres(url, idle_in_transaction).await?
        } else {
            return Err(StoreError::BadUrl(url.to_string()));
        };
        migrator(store.backend).run(&store.write).await?;
        Ok(store)
    }

    /// Opens (or creates) `dir/corral.db`, creating `dir` if needed (readable by its owner
    /// only).
    pub async fn open_sqlite_dir(dir: &Path) -> Result<Store> {
        create_private_dir(dir).map_err(|source| StoreError::File {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join("corral.db");
        let path = path
            .to_str()
            .ok_or_else(|| StoreError::BadUrl(path.display().to_string()))?;
        Self::open(&format!("sqlite://{}", encode_path(path))).await
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Closes the pools, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.write.close().await;
        self.read.close().await;
    }

    async fn open_sqlite(url: &str) -> Result<Store> {
        // Through the Any driver every connection re-reads the URL, so each would get its own
        // in-memory database.
        if url.contains(":memory:") || url.contains("mode=memory") {
            return Err(StoreError::BadUrl(url.to_string()));
        }
        let url = if url.contains("mode=") {
            url.to_string()
        } else if url.contains('?') {
            format!("{url}&mode=rwc")
        } else {
            format!("{url}?mode=rwc")
        };
        check_sqlite(&url).await?;
        let options: AnyConnectOptions = url.parse()?;
        let max_pages = Arc::new(AtomicU64::new(0));
        // WAL lets readers go on while one writer commits; it is a property of the file, so
        // setting it on every connection is a no-op after the first. FULL synchronous: a
        // committed write survives power loss, not just a killed process. secure_delete: a
        // value overwritten (a provider's secrets sealed in place) does not linger in the page.
        let pool = |max| {
            let max_pages = max_pages.clone();
            with_clean_release(AnyPoolOptions::new().max_connections(max), true)
                .after_connect(move |conn, _| {
                    let max_pages = max_pages.load(Ordering::Relaxed);
                    Box::pin(async move {
                        let limit = match max_pages {
                            0 => String::new(),
                            n => format!("PRAGMA max_page_count = {n};"),
                        };
                        conn.execute(AssertSqlSafe(format!(
                            "PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}; \
                             PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
                             PRAGMA foreign_keys = ON; PRAGMA secure_delete = FAST; {limit}"
                        )))
                        .await?;
                        Ok(())
                    })
                })
                .connect_with(options.clone())
        };
        // The writer first: it creates the file and switches it to WAL before any reader opens.
        let write = pool(1).await?;
        let read = pool(4).await?;
        Ok(Store {
            backend: Backend::Sqlite,
            read,
            write,
            max_pages,
            fence: None,
            url: None,
        })
    }

    async fn open_postgres(url: &str, idle_in_transaction: Duration) -> Result<Store> {
        let idle_ms = idle_in_transaction.as_millis().max(1);
        let pool = with_clean_release(AnyPoolOptions::new(), false)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    conn.execute(AssertSqlSafe(format!(
                        "SET idle_in_transaction_session_timeout = {idle_ms}"
                    )))
                    .await
                    .map(drop)
                })
            })
            .max_connections(8)
            // A database that is down fails a call after this (503 at the API), rather than
            // holding it for long.
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        Ok(Store {
            backend: Backend::Postgres,
            read: pool.clone(),
            write: pool,
            max_pages: Arc::default(),
            fence: None,
            url: Some(url.into()),
        })
    }

    /// A transaction that will write. On SQLite `BEGIN IMMEDIATE` takes the write lock at once
    /// (waiting up to the busy timeout for another process), so the transaction never fails
    /// half-way when its first write would upgrade a read lock. On PostgreSQL it is READ
    /// COMMITTED: writes are guarded by compare-and-swap `WHERE` clauses or `FOR UPDATE` locks.
    async fn write_tx(&self) -> Result<Tx> {
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN",
        };
        let mut tx = begin_on(&self.write, begin).await?;
        if let Some(fence) = &self.fence {
            leases::check(&mut tx, fence).await?;
        }
        Ok(tx)
    }

    /// A read-only transaction that sees one instant: SQLite's WAL read transactions already
    /// do; PostgreSQL needs REPEATABLE READ for it.
    async fn read_tx(&self) -> Result<Tx> {
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN",
            Backend::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        };
        begin_on(&self.read, begin).await
    }

    /// Checks that the store can take writes now: reads nothing a caller needs and keeps
    /// nothing it writes but one timestamp. A full disk shows when a write commits (SQLite's
    /// WAL or PostgreSQL's log cannot grow), so the check commits one; on SQLite it also asks
    /// the database file for room (pages it would have to add), then gives them back.
    pub async fn check_writable(&self, now: Timestamp) -> Result<()> {
        if self.backend == Backend::Sqlite {
            let mut tx = self.write_tx().await?;
            sqlx::query("UPDATE health SET probe = zeroblob(16384) WHERE id = 1")
                .execute(&mut *tx)
                .await?;
            tx.rollback().await?;
        }
        let mut tx = self.write_tx().await?;
        sqlx::query("UPDATE health SET checked_at = $1 WHERE id = 1")
            .bind(now.0)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// On SQLite, copies the WAL into the database file and empties it, so that values
    /// overwritten since (secrets sealed in place) are gone from both files. Best effort: with
    /// a reader in the way it copies what it can. Nothing to do on PostgreSQL.
    pub async fn checkpoint(&self) -> Result<()> {
        if self.backend == Backend::Sqlite {
            self.write
                .execute("PRAGMA wal_checkpoint(TRUNCATE)")
                .await?;
        }
        Ok(())
    }

    /// Caps the SQLite database at `pages` pages (`None`: lifts the cap) on every connection,
    /// now and when the pool opens new ones: writes that need room then fail with
    /// SQLITE_FULL, as they do on a full disk. A cap below the file's size stops it where it is.
    #[doc(hidden)]
    pub async fn sqlite_max_pages_for_test(&self, pages: Option<u64>) -> Result<()> {
        self.max_pages.store(pages.unwrap_or(0), Ordering::Relaxed);
        // SQLite's own default: no cap worth the name.
        let n = pages.unwrap_or(1_073_741_823);
        self.write
            .execute(AssertSqlSafe(format!("PRAGMA max_page_count = {n}")))
            .await?;
        Ok(())
    }

    /// Picks the form of a row-locking read (see [`locked!`]) for this database.
    fn locking(&self, (sqlite, postgres): (&'static str, &'static str)) -> &'static str {
        match self.backend {
            Backend::Sqlite => sqlite,
            Backend::Postgres => postgres,
        }
    }
}

/// Begins a transaction on `pool` with the statement `begin`, to its end even if the caller is
/// cancelled (a client that went away): sqlx's PostgreSQL driver counts a transaction only once
/// BEGIN's answer is read, so a caller cancelled while it waited left the transaction open on a
/// connection the pool took for idle and handed to the next caller (seen with several managers
/// under SIGSTOP: "cannot execute UPDATE in a read-only transaction", then "current transaction
/// is aborted" for every later use of that connection). Begun in a task of its own, a
/// transaction whose caller is gone is dropped once begun, and so rolled back.
async fn begin_on(pool: &AnyPool, begin: &'static str) -> Result<Tx> {
    let pool = pool.clone();
    tokio::spawn(async move { pool.begin_with(begin).await })
        .await
        .map_err(|e| {
            StoreError::Io(std::io::Error::other(format!(
                "beginning a transaction: {e}"
            )))
        })?
        .map_err(StoreError::from)
}

/// Pool options that never give a connection back with a transaction still open. sqlx counts
/// a connection's transaction depth itself and rolls a dropped transaction back on the
/// connection's next use, taking the depth down only if that ROLLBACK succeeds. When a COMMIT
/// or a statement fails with SQLITE_FULL (a full disk) or an I/O error, SQLite has often rolled
/// the transaction back already, so that ROLLBACK fails ("no transaction is active"), the depth
/// stays at 1 and every later `begin_with` on the connection fails ("attempted to call
/// begin_with at non-zero transaction depth"); SQLite's writer pool has one connection, so that
/// was every write until a restart. Such a connection is closed instead and the pool opens a
/// fresh one. `sqlite`: SQLite's worker thread runs a dropped transaction's ROLLBACK, and
/// counts the depth, after the drop; PostgreSQL's driver counts it at once.
fn with_clean_release(options: AnyPoolOptions, sqlite: bool) -> AnyPoolOptions {
    options.after_release(move |conn, _| {
        Box::pin(async move {
            if sqlite {
                // Waits for that ROLLBACK, so the depth below is current.
                conn.ping().await?;
            }
            Ok(!conn.is_in_transaction())
        })
    })
}

/// Opens the SQLite file once, on its own, before the pools do: a pool retries a failing
/// connection until its timeout and then says only "pool timed out", while this says what is
/// wrong with the file. Takes the write lock for a moment, waiting a few seconds at most.
async fn check_sqlite(url: &str) -> Result<()> {
    let options: SqliteConnectOptions = url.parse()?;
    let path = options.get_filename().to_path_buf();
    protect_sqlite_files(&path, url.contains("mode=rwc"))?;
    let options = options.busy_timeout(SQLITE_OPEN_LOCK_WAIT);
    let check = async {
        let mut conn = SqliteConnection::connect_with(&options).await?;
        conn.execute("PRAGMA journal_mode = WAL").await?;
        conn.execute("BEGIN IMMEDIATE").await?;
        conn.execute("ROLLBACK").await?;
        conn.close().await
    };
    check.await.map_err(|e| match sqlite_code(&e) {
        Some(SQLITE_NOTADB | SQLITE_CORRUPT) => StoreError::NotADatabase { path, source: e },
        Some(SQLITE_BUSY | SQLITE_LOCKED) => StoreError::Locked {
            path,
            waited: SQLITE_OPEN_LOCK_WAIT,
        },
        _ => StoreError::Database(e),
    })
}

/// SQLite's primary result code of a database error.
fn sqlite_code(e: &sqlx::Error) -> Option<u32> {
    let code: u32 = e.as_database_error()?.code()?.parse().ok()?;
    Some(code & 0xff)
}

/// The database holds provider secrets and token hashes: its file is created readable by its
/// owner only, and an existing one (with its WAL and shared-memory files, which SQLite creates
/// with the database's mode) is made so.
fn protect_sqlite_files(db: &Path, create: bool) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::File { path, source }
        };
        if create {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(db)
                .map_err(failed(db))?;
        }
        for suffix in ["", "-wal", "-shm"] {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            let file = PathBuf::from(name);
            match std::fs::metadata(&file) {
                Ok(m) if m.permissions().mode() & 0o077 != 0 => {
                    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
                        .map_err(failed(&file))?;
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(failed(&file)(e)),
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (db, create);
    Ok(())
}

/// Creates `dir` (and its parents) with the new directories readable by their owner only.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// The migrations for one database, as sqlx's migrator runs them: each once, in a transaction,
/// recorded with its checksum in `_sqlx_migrations` (an edited, already applied migration is
/// an error, not silently skipped).
fn migrator(backend: Backend) -> Migrator {
    Migrator::with_migrations(
        MIGRATIONS
            .iter()
            .map(|&(version, description, sqlite, postgres)| {
                let sql = match backend {
                    Backend::Sqlite => sqlite,
                    Backend::Postgres => postgres,
                };
                Migration::new(
                    version,
                    Cow::Borrowed(description),
                    MigrationType::Simple,
                    AssertSqlSafe(sql).into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}

/// `sqlite://` + a path, with the characters a URL would misread percent-encoded.
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            '%' | '?' | '#' | ' ' | '"' | '<' | '>' | '`' | '{' | '}' => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// A read that locks its rows until the transaction ends: `FOR UPDATE` on PostgreSQL; on SQLite
/// the `BEGIN IMMEDIATE` transaction already holds the file's write lock.
macro_rules! locked {
    ($($part:expr),+ $(,)?) => {
        (concat!($($part),+), concat!($($part),+, " FOR UPDATE"))
    };
}
pub(crate) use locked;

#[cfg(test)]
mod tests {
    use super::*;

    /// A migration file that is not in `MIGRATIONS` would never run.
    #[test]
    fn every_migration_file_is_embedded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        for (backend, column) in [("sqlite", 2), ("postgres", 3)] {
            let mut files: Vec<String> = std::fs::read_dir(dir.join(backend))
                .expect("migrations dir")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            files.sort();
            let listed: Vec<String> = MIGRATIONS
                .iter()
                .map(|m| format!("{:04}_{}.sql", m.0, m.1))
                .collect();
            assert_eq!(files, listed, "{backend}");
            for (file, m) in files.iter().zip(MIGRATIONS) {
                let text = std::fs::read_to_string(dir.join(backend).join(file)).expect("read");
                let embedded = if column == 2 { m.2 } else { m.3 };
                assert_eq!(text, embedded, "{backend}/{file}");
            }
        }
    }
}
