//! The store's one error type.

/// What a store call can fail with. Callers branch on the first four; the rest are the
/// database's own failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{what} {id:?} not found")]
    NotFound { what: &'static str, id: String },
    /// It already exists, or it changed since it was read (re-read and retry).
    #[error("{what} {id:?} already exists or changed since it was read")]
    Conflict { what: &'static str, id: String },
    /// The change is not allowed in the current state (e.g. deleting a group still in use).
    #[error("{0}")]
    Refused(String),
    /// A fenced write of a group whose lease has moved on to another manager (or a later
    /// epoch): this manager no longer owns the group and writes nothing more for it.
    #[error(
        "the lease of group {group:?} moved on from epoch {epoch}: another manager owns it now"
    )]
    Fenced { group: String, epoch: i64 },
    /// A row that does not parse back into the domain type.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// Opening found a file that SQLite cannot read as a database.
    #[error(
        "{}: not a SQLite database, or a damaged one ({source}); restore it from a backup, or \
         move it away to start with an empty database",
        path.display()
    )]
    NotADatabase {
        path: std::path::PathBuf,
        source: sqlx::Error,
    },
    /// Opening waited this long for another process's lock on the file.
    #[error(
        "{}: locked by another process (waited {} s for it to let go); is another manager, or a \
         sqlite3 shell, using this database?",
        path.display(),
        waited.as_secs()
    )]
    Locked {
        path: std::path::PathBuf,
        waited: std::time::Duration,
    },
    #[error("unsupported database URL {0:?}: use sqlite://PATH or postgres://...")]
    BadUrl(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A file or directory of the store could not be created or protected.
    #[error("{}: {source}", path.display())]
    File {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    pub fn not_found(what: &'static str, id: impl ToString) -> Self {
        StoreError::NotFound {
            what,
            id: id.to_string(),
        }
    }

    pub(crate) fn conflict(what: &'static str, id: impl ToString) -> Self {
        StoreError::Conflict {
            what,
            id: id.to_string(),
        }
    }
}

impl StoreError {
    /// The database cannot be reached now, or is shutting down or starting (a restart, a cut
    /// connection, no connection free in time), or SQLite's file stayed locked past the busy
    /// timeout: nothing was written, and the same call may go through in a moment.
    pub fn is_unavailable(&self) -> bool {
        let StoreError::Database(e) = self else {
            return false;
        };
        match e {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|code| {
                match code.len() {
                    // PostgreSQL's SQLSTATE: connection exceptions (08), the server shutting
                    // down or starting (57P01-57P03), too many connections (53300), a session
                    // ended for idling in its transaction (25P03).
                    5 => {
                        code.starts_with("08")
                            || code.starts_with("57P")
                            || code == "53300"
                            || code == "25P03"
                    }
                    // SQLite's (extended) result code: BUSY or LOCKED.
                    _ => code.parse::<u32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6)),
                }
            }),
            _ => false,
        }
    }
}
