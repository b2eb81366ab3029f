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

mod agents;
mod catalog;
mod codec;
mod cycle;
mod error;
mod events;
mod instances;
mod sessions;
pub mod testing;

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{Any, AnyPool, AssertSqlSafe, Executor, SqlSafeStr, Transaction};

pub use cycle::{Applied, MAX_PENDING_PER_PASS};
pub use error::{Result, StoreError};
pub use events::{Event, EventFilter, NewEvent, Role, TokenRecord};
pub use instances::{InstancePhase, InstanceRecord};
pub use sessions::{HistoryEntry, SessionFilter, SessionRecord};

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
];

/// How long a SQLite connection waits for another process's write lock before failing.
const SQLITE_BUSY_TIMEOUT_MS: u32 = 10_000;

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
}

type Tx = Transaction<'static, Any>;

impl Store {
    /// Opens `sqlite://PATH` (created if missing) or `postgres://...`, and brings the schema up
    /// to date.
    pub async fn open(url: &str) -> Result<Store> {
        sqlx::any::install_default_drivers();
        let store = if url.starts_with("sqlite:") {
            Self::open_sqlite(url).await?
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Self::open_postgres(url).await?
        } else {
            return Err(StoreError::BadUrl(url.to_string()));
        };
        migrator(store.backend).run(&store.write).await?;
        Ok(store)
    }

    /// Opens (or creates) `dir/corral.db`, creating `dir` if needed.
    pub async fn open_sqlite_dir(dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir)?;
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
        let options: AnyConnectOptions = url.parse()?;
        // WAL lets readers go on while one writer commits; it is a property of the file, so
        // setting it on every connection is a no-op after the first. FULL synchronous: a
        // committed write survives power loss, not just a killed process.
        let pool = |max| {
            AnyPoolOptions::new()
                .max_connections(max)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        conn.execute(AssertSqlSafe(format!(
                            "PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}; \
                             PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
                             PRAGMA foreign_keys = ON;"
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
        })
    }

    async fn open_postgres(url: &str) -> Result<Store> {
        let pool = AnyPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(30))
            .connect(url)
            .await?;
        Ok(Store {
            backend: Backend::Postgres,
            read: pool.clone(),
            write: pool,
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
        Ok(self.write.begin_with(begin).await?)
    }

    /// A read-only transaction that sees one instant: SQLite's WAL read transactions already
    /// do; PostgreSQL needs REPEATABLE READ for it.
    async fn read_tx(&self) -> Result<Tx> {
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN",
            Backend::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        };
        Ok(self.read.begin_with(begin).await?)
    }

    /// Picks the form of a row-locking read (see [`locked!`]) for this database.
    fn locking(&self, (sqlite, postgres): (&'static str, &'static str)) -> &'static str {
        match self.backend {
            Backend::Sqlite => sqlite,
            Backend::Postgres => postgres,
        }
    }
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
