//! Files in the database, so that every manager on it serves them whichever manager received
//! them: sessions' inputs, outputs and logs, agent builds. A file is named by a scope (whose
//! files it is: `sessions/<id>`, `agent-builds`) and a name in it (a relative path); the caller
//! checks both. It is rows of at most [`PIECE`] bytes, each from byte `start`: a log grows by a
//! row, and a read from an offset reads only the rows it needs.

use futures_util::TryStreamExt;
use sqlx::Row;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::{Result, StoreError};
use crate::{Store, Tx};

/// The most bytes one row holds: a log's append (an agent sends at most 1 MiB) is one row.
pub const PIECE: usize = 1 << 20;

/// What [`Store::append_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    Done,
    /// The file holds this many bytes, not the offset given: nothing was written (a chunk sent
    /// twice, or one skipped).
    Size(u64),
}

impl Store {
    /// Stores file `name` of `scope` as what `data` reads, in place of any earlier one, in one
    /// transaction: a reader sees the old file or the new, never a part. A name that is a
    /// directory of a stored file, or has a stored file as a directory, is a conflict (as on a
    /// file system, where both could not be written). Its size.
    pub async fn put_file(
        &self,
        scope: &str,
        name: &str,
        mut data: impl AsyncRead + Unpin,
    ) -> Result<u64> {
        let mut tx = self.write_tx().await?;
        self.lock_file(&mut tx, scope, name).await?;
        if let Some(other) = clashing(&mut tx, scope, name).await? {
            return Err(StoreError::conflict("file", other));
        }
        sqlx::query("DELETE FROM files WHERE scope = $1 AND name = $2")
            .bind(scope)
            .bind(name)
            .execute(&mut *tx)
            .await?;
        let mut start = 0;
        loop {
            let mut piece = Vec::with_capacity(PIECE);
            (&mut data)
                .take(PIECE as u64)
                .read_to_end(&mut piece)
                .await?;
            // An empty file is one empty row: it is there.
            if !piece.is_empty() || start == 0 {
                insert(&mut tx, scope, name, start, &piece).await?;
            }
            start += piece.len() as u64;
            if piece.len() < PIECE {
                break;
            }
        }
        tx.commit().await?;
        Ok(start)
    }

    /// Appends `data` to file `name` of `scope` (created if missing) if it holds `offset` bytes
    /// now. Of two appends at one offset at once, through two managers, one is written.
    pub async fn append_file(
        &self,
        scope: &str,
        name: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<Appended> {
        let mut tx = self.write_tx().await?;
        self.lock_file(&mut tx, scope, name).await?;
        let size = size_of(&mut *tx, scope, name).await?;
        if size != offset {
            return Ok(Appended::Size(size));
        }
        let mut start = offset;
        for piece in data.chunks(PIECE) {
            if !insert(&mut tx, scope, name, start, piece).await? {
                // Another manager appended at this offset since the size was read.
                tx.rollback().await?;
                return Ok(Appended::Size(size_of(&self.read, scope, name).await?));
            }
            start += piece.len() as u64;
        }
        tx.commit().await?;
        Ok(Appended::Done)
    }

    /// At most `max` bytes of file `name` of `scope` from byte `offset` (none past its end);
    /// `None` if there is no such file.
    pub async fn read_file(
        &self,
        scope: &str,
        name: &str,
        offset: u64,
        max: u64,
    ) -> Result<Option<Vec<u8>>> {
        let from = i64::try_from(offset).unwrap_or(i64::MAX);
        let until = i64::try_from(offset.saturating_add(max)).unwrap_or(i64::MAX);
        // No row is longer than a piece: the first one needed starts after this, so the read
        // of a long log's end scans its last rows only.
        let after = from.saturating_sub(PIECE as i64);
        let mut rows = sqlx::query(
            "SELECT start, data FROM files WHERE scope = $1 AND name = $2 \
             AND start > $3 AND start < $4 AND start + length(data) > $5 ORDER BY start",
        )
        .bind(scope)
        .bind(name)
        .bind(after)
        .bind(until)
        .bind(from)
        .fetch(&self.read);
        // Row by row into one buffer: a large file is not held twice, as rows and as the buffer.
        let mut out: Option<Vec<u8>> = None;
        while let Some(row) = rows.try_next().await? {
            let start = u64::try_from(row.try_get::<i64, _>(0)?).unwrap_or(0);
            let data: Vec<u8> = row.try_get(1)?;
            let skip = usize::try_from(offset.saturating_sub(start)).unwrap_or(usize::MAX);
            let out = out.get_or_insert_with(Vec::new);
            out.extend_from_slice(data.get(skip..).unwrap_or_default());
        }
        drop(rows);
        if let Some(mut out) = out {
            out.truncate(usize::try_from(max).unwrap_or(usize::MAX));
            return Ok(Some(out));
        }
        // Nothing from the offset on: an empty read if the file is there.
        let there: Option<i64> =
            sqlx::query_scalar("SELECT start FROM files WHERE scope = $1 AND name = $2 LIMIT 1")
                .bind(scope)
                .bind(name)
                .fetch_optional(&self.read)
                .await?;
        Ok(there.map(|_| Vec::new()))
    }

    /// The files of `scope` whose names begin with `prefix`, with their sizes, by name.
    pub async fn list_files(&self, scope: &str, prefix: &str) -> Result<Vec<(String, u64)>> {
        let rows = sqlx::query(
            "SELECT name, CAST(SUM(length(data)) AS BIGINT) FROM files \
             WHERE scope = $1 AND substr(name, 1, CAST($2 AS INTEGER)) = $3 GROUP BY name",
        )
        .bind(scope)
        .bind(prefix.chars().count() as i64)
        .bind(prefix)
        .fetch_all(&self.read)
        .await?;
        let mut files = rows
            .into_iter()
            .map(|row| {
                let size: i64 = row.try_get(1)?;
                Ok((row.try_get(0)?, u64::try_from(size).unwrap_or(0)))
            })
            .collect::<Result<Vec<(String, u64)>>>()?;
        // By bytes, whatever the database's collation.
        files.sort();
        Ok(files)
    }

    /// Removes file `name` of `scope`, if it is there.
    pub async fn delete_file(&self, scope: &str, name: &str) -> Result<()> {
        let mut tx = self.write_tx().await?;
        self.lock_file(&mut tx, scope, name).await?;
        sqlx::query("DELETE FROM files WHERE scope = $1 AND name = $2")
            .bind(scope)
            .bind(name)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Makes writers of one file take turns until `tx` ends. On PostgreSQL two uploads of one
    /// name through two managers would otherwise interleave their rows (the second's rows at
    /// offsets the first wrote are dropped); SQLite writes one transaction at a time already.
    async fn lock_file(&self, tx: &mut Tx, scope: &str, name: &str) -> Result<()> {
        if self.backend == crate::Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 0))")
                .bind(scope)
                .bind(name)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }
}

/// How many bytes file `name` of `scope` holds (0 if there is none).
async fn size_of<'e>(
    db: impl sqlx::Executor<'e, Database = sqlx::Any>,
    scope: &str,
    name: &str,
) -> Result<u64> {
    // The last row's end, found by the key from the end: a long log's rows are not all read.
    let size: Option<i64> = sqlx::query_scalar(
        "SELECT CAST(start + length(data) AS BIGINT) FROM files \
         WHERE scope = $1 AND name = $2 ORDER BY start DESC LIMIT 1",
    )
    .bind(scope)
    .bind(name)
    .fetch_optional(db)
    .await?;
    Ok(size.map_or(0, |s| u64::try_from(s).unwrap_or(0)))
}

/// Writes one row; false if a row at `start` was there already.
async fn insert(tx: &mut Tx, scope: &str, name: &str, start: u64, piece: &[u8]) -> Result<bool> {
    let done = sqlx::query(
        "INSERT INTO files (scope, name, start, data) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (scope, name, start) DO NOTHING",
    )
    .bind(scope)
    .bind(name)
    .bind(i64::try_from(start).unwrap_or(i64::MAX))
    .bind(piece)
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// A stored file of `scope` that `name` cannot stand beside: one of its directories as a file,
/// or a file under `name` as a directory.
async fn clashing(tx: &mut Tx, scope: &str, name: &str) -> Result<Option<String>> {
    let ancestors: Vec<&str> = name.match_indices('/').map(|(i, _)| &name[..i]).collect();
    for ancestor in ancestors {
        let there: Option<i64> =
            sqlx::query_scalar("SELECT start FROM files WHERE scope = $1 AND name = $2 LIMIT 1")
                .bind(scope)
                .bind(ancestor)
                .fetch_optional(&mut **tx)
                .await?;
        if there.is_some() {
            return Ok(Some(ancestor.to_string()));
        }
    }
    let directory = format!("{name}/");
    let under: Option<String> = sqlx::query_scalar(
        "SELECT name FROM files \
         WHERE scope = $1 AND substr(name, 1, CAST($2 AS INTEGER)) = $3 LIMIT 1",
    )
    .bind(scope)
    .bind(directory.chars().count() as i64)
    .bind(&directory)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(under)
}
