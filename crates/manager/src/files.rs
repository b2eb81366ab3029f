//! Where the files the manager serves are kept (sessions' inputs, outputs and logs, agent
//! builds), so that whichever manager is asked serves them: in the data directory when the
//! database is SQLite (one manager uses it), in the database when it is PostgreSQL (several
//! managers may, and an upload and a read may go to different ones).
//!
//! A file is named by a scope, whose files they are ([`session_scope`], [`AGENT_BUILDS`]), and
//! its path in the scope (`inputs/PATH`, `outputs/PATH`, `stdout.log`; a build's digest), the
//! path checked by the caller ([`crate::names::check_relative`]). In the data directory it is
//! `<data dir>/<scope>/<path>`.

use std::path::{Path, PathBuf};
use std::pin::Pin;

use axum::body::Bytes;
use axum::http::StatusCode;
use corral_api::sessions::OutputFile;
use corral_store::{Appended, Backend, Store, StoreError};
use futures_util::Stream;
use serde_json::json;

use crate::error::ApiError;

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// The scope of the agent builds' files, each named by its SHA-256.
pub(crate) const AGENT_BUILDS: &str = "agent-builds";

/// The scope of a session's files.
pub(crate) fn session_scope(session: &str) -> String {
    format!("sessions/{session}")
}

/// A file's bytes as they are read, piece by piece.
pub(crate) type Pieces = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

#[derive(Clone)]
pub(crate) enum Files {
    /// The data directory: `<data dir>/<scope>/<name>`.
    Directory(PathBuf),
    Database(Store),
}

impl Files {
    /// Where the files of a manager on `store` with data directory `data_dir` go.
    pub(crate) fn for_store(store: &Store, data_dir: &Path) -> Files {
        match store.backend() {
            Backend::Sqlite => Files::Directory(data_dir.to_path_buf()),
            Backend::Postgres => Files::Database(store.clone()),
        }
    }

    /// Stores file `name` of `scope` whole, in place of any earlier one: a reader sees the
    /// old file or the new, never a part. A name that clashes with a stored file (one is the
    /// other's directory) is a conflict (409).
    pub(crate) async fn put(&self, scope: &str, name: &str, data: &[u8]) -> Result<()> {
        match self {
            Files::Directory(root) => {
                let dir = root.join(scope);
                write_atomically(&dir, &dir.join(name), data).await
            }
            Files::Database(store) => match store.put_file(scope, name, data).await {
                Err(StoreError::Conflict { .. }) => Err(clash(name)),
                done => done.map(|_| ()).map_err(ApiError::from),
            },
        }
    }

    /// Keeps the file at `received` (in the data directory, written and synced) as file `name`
    /// of `scope`: moved into place, or copied into the database (and left for the caller to
    /// remove).
    pub(crate) async fn keep(&self, scope: &str, name: &str, received: &Path) -> Result<()> {
        match self {
            Files::Directory(root) => {
                let dir = root.join(scope);
                tokio::fs::create_dir_all(&dir).await.map_err(io_error)?;
                tokio::fs::rename(received, dir.join(name))
                    .await
                    .map_err(io_error)
            }
            Files::Database(store) => {
                let file = tokio::fs::File::open(received).await.map_err(io_error)?;
                store.put_file(scope, name, file).await?;
                Ok(())
            }
        }
    }

    /// File `name` of `scope` as it is read, in pieces; `None` if there is no such file.
    pub(crate) async fn pieces(&self, scope: &str, name: &str) -> Result<Option<Pieces>> {
        use tokio::io::AsyncReadExt;
        const PIECE: usize = 1 << 16;
        match self {
            Files::Directory(root) => {
                let file = match tokio::fs::File::open(root.join(scope).join(name)).await {
                    Ok(file) => file,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(io_error(e)),
                };
                let pieces = futures_util::stream::try_unfold(file, |mut file| async move {
                    let mut piece = vec![0; PIECE];
                    let n = file.read(&mut piece).await?;
                    piece.truncate(n);
                    Ok::<_, std::io::Error>((n > 0).then(|| (Bytes::from(piece), file)))
                });
                Ok(Some(Box::pin(pieces)))
            }
            Files::Database(store) => {
                if store.read_file(scope, name, 0, 0).await?.is_none() {
                    return Ok(None);
                }
                let at = (store.clone(), scope.to_string(), name.to_string(), 0u64);
                let pieces = futures_util::stream::try_unfold(at, |at| async move {
                    let (store, scope, name, offset) = at;
                    let piece = store
                        .read_file(&scope, &name, offset, corral_store::FILE_PIECE as u64)
                        .await
                        .map_err(std::io::Error::other)?
                        .unwrap_or_default();
                    let next = offset + piece.len() as u64;
                    Ok((!piece.is_empty())
                        .then(|| (Bytes::from(piece), (store, scope, name, next))))
                });
                Ok(Some(Box::pin(pieces)))
            }
        }
    }

    /// Removes file `name` of `scope`, if it is there.
    pub(crate) async fn remove(&self, scope: &str, name: &str) -> Result<()> {
        match self {
            Files::Directory(root) => {
                match tokio::fs::remove_file(root.join(scope).join(name)).await {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error(e)),
                    _ => Ok(()),
                }
            }
            Files::Database(store) => Ok(store.delete_file(scope, name).await?),
        }
    }

    /// Appends `data` to file `name` of `scope` if it holds `offset` bytes now; otherwise
    /// writes nothing and answers 409 with the size it holds (`details.size`), so that a chunk
    /// sent twice is written once.
    pub(crate) async fn append(
        &self,
        scope: &str,
        name: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        let appended = match self {
            Files::Directory(root) => append_to_file(&root.join(scope), name, offset, data).await?,
            Files::Database(store) => store.append_file(scope, name, offset, data).await?,
        };
        match appended {
            Appended::Done => Ok(()),
            Appended::Size(size) => Err(ApiError::new(
                StatusCode::CONFLICT,
                "offset",
                format!("the log has {size} bytes, not {offset}"),
            )
            .with_details(json!({"size": size}))),
        }
    }

    /// At most `max` bytes of file `name` of `scope` from `offset` (none past its end);
    /// `None` if there is no such file.
    pub(crate) async fn read(
        &self,
        scope: &str,
        name: &str,
        offset: u64,
        max: u64,
    ) -> Result<Option<Vec<u8>>> {
        match self {
            Files::Directory(root) => {
                read_from_file(&root.join(scope).join(name), offset, max).await
            }
            Files::Database(store) => Ok(store.read_file(scope, name, offset, max).await?),
        }
    }

    /// The files of `scope` under directory `dir` (`outputs`), with their paths in it and their
    /// sizes, by path.
    pub(crate) async fn list(&self, scope: &str, dir: &str) -> Result<Vec<OutputFile>> {
        match self {
            Files::Directory(root) => list_directory(&root.join(scope).join(dir)).await,
            Files::Database(store) => {
                let prefix = format!("{dir}/");
                Ok(store
                    .list_files(scope, &prefix)
                    .await?
                    .into_iter()
                    .map(|(name, size)| OutputFile {
                        path: name[prefix.len()..].to_string(),
                        size,
                    })
                    .collect())
            }
        }
    }

    /// Which of `names` (paths under `dir`) `scope` does not have yet.
    pub(crate) async fn missing<'a>(
        &self,
        scope: &str,
        dir: &str,
        names: &'a [String],
    ) -> Result<Vec<&'a str>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let there: Vec<String> = match self {
            Files::Directory(root) => {
                let dir = root.join(scope).join(dir);
                let mut there = Vec::new();
                for name in names {
                    if tokio::fs::metadata(dir.join(name))
                        .await
                        .is_ok_and(|m| m.is_file())
                    {
                        there.push(name.clone());
                    }
                }
                there
            }
            Files::Database(_) => self
                .list(scope, dir)
                .await?
                .into_iter()
                .map(|f| f.path)
                .collect(),
        };
        Ok(names
            .iter()
            .filter(|n| !there.contains(n))
            .map(String::as_str)
            .collect())
    }
}

/// A name that cannot be stored beside what is already there.
fn clash(name: &str) -> ApiError {
    let last = name.rsplit('/').next().unwrap_or(name);
    ApiError::new(
        StatusCode::CONFLICT,
        "conflict",
        format!("{last} clashes with a file or directory already uploaded"),
    )
}

fn io_error(e: std::io::Error) -> ApiError {
    crate::agents::data_error(e, "its files")
}

/// Writes to a temporary file of its own in the scope's `tmp/` (same file system, outside what
/// users list), then renames it into place: a reader never sees half a file, and two uploads
/// at once never share a temporary file.
async fn write_atomically(scope_dir: &Path, target: &Path, data: &[u8]) -> Result<()> {
    let tmp = scope_dir.join("tmp");
    tokio::fs::create_dir_all(&tmp).await.map_err(io_error)?;
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| path_error(target, e))?;
    }
    let partial = tmp.join(crate::auth::random_hex(12));
    let written = async {
        tokio::fs::write(&partial, data).await?;
        tokio::fs::rename(&partial, target).await
    }
    .await;
    if let Err(e) = written {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(path_error(target, e));
    }
    Ok(())
}

/// A file path that cannot be written because of what is already there (a file where a
/// directory is needed, or the reverse) is the caller's mistake; anything else is ours.
fn path_error(target: &Path, e: std::io::Error) -> ApiError {
    use std::io::ErrorKind::*;
    match e.kind() {
        NotADirectory | IsADirectory | AlreadyExists | DirectoryNotEmpty => clash(
            &target
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
        _ => io_error(e),
    }
}

/// Serialises appends to one file: the size check and the write happen as one step, so two
/// copies of a chunk sent at once cannot both pass the check. Striped by path so the lock
/// table stays small.
fn append_lock(path: &Path) -> &'static tokio::sync::Mutex<()> {
    use std::hash::{Hash, Hasher};
    static LOCKS: std::sync::OnceLock<Vec<tokio::sync::Mutex<()>>> = std::sync::OnceLock::new();
    let locks = LOCKS.get_or_init(|| (0..64).map(|_| tokio::sync::Mutex::new(())).collect());
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    &locks[(h.finish() % locks.len() as u64) as usize]
}

async fn append_to_file(dir: &Path, name: &str, offset: u64, data: &[u8]) -> Result<Appended> {
    use tokio::io::AsyncWriteExt;
    tokio::fs::create_dir_all(dir).await.map_err(io_error)?;
    let path = dir.join(name);
    let _appending = append_lock(&path).lock().await;
    let size = tokio::fs::metadata(&path)
        .await
        .map(|m| m.len())
        .unwrap_or(0);
    if size != offset {
        return Ok(Appended::Size(size));
    }
    let mut f = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .await
        .map_err(io_error)?;
    f.write_all(data).await.map_err(io_error)?;
    f.flush().await.map_err(io_error)?;
    Ok(Appended::Done)
}

async fn read_from_file(path: &Path, offset: u64, max: u64) -> Result<Option<Vec<u8>>> {
    use std::io::ErrorKind::*;
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut f = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(e) if matches!(e.kind(), NotFound | NotADirectory) => return Ok(None),
        Err(e) => return Err(io_error(e)),
    };
    let meta = f.metadata().await.map_err(io_error)?;
    if meta.is_dir() {
        return Ok(None);
    }
    let mut buf = Vec::new();
    // Past the end there is nothing yet (and the file system may refuse the seek).
    if offset < meta.len() {
        f.seek(std::io::SeekFrom::Start(offset))
            .await
            .map_err(io_error)?;
        f.take(max).read_to_end(&mut buf).await.map_err(io_error)?;
    }
    Ok(Some(buf))
}

async fn list_directory(root: &Path) -> Result<Vec<OutputFile>> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(mut entries) = tokio::fs::read_dir(&dir).await else {
            continue;
        };
        while let Some(e) = entries.next_entry().await.map_err(io_error)? {
            let meta = e.metadata().await.map_err(io_error)?;
            if meta.is_dir() {
                dirs.push(e.path());
            } else {
                let rel = e
                    .path()
                    .strip_prefix(root)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                files.push(OutputFile {
                    path: rel,
                    size: meta.len(),
                });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// Moves into the database the files an earlier version of a manager on PostgreSQL kept in its
/// data directory (`sessions/<id>/...`, `agent-builds/<sha256>`), so that every manager serves
/// them. Each file is removed once it is in; one whose name the database holds already (another
/// copy) is left where it is, and said so. How many were moved.
pub(crate) async fn import_local(store: &Store, data_dir: &Path) -> Result<usize, StoreError> {
    let mut scopes = vec![(AGENT_BUILDS.to_string(), data_dir.join(AGENT_BUILDS))];
    if let Ok(mut sessions) = tokio::fs::read_dir(data_dir.join("sessions")).await {
        while let Some(e) = sessions.next_entry().await? {
            let id = e.file_name().to_string_lossy().into_owned();
            scopes.push((session_scope(&id), e.path()));
        }
    }
    let mut moved = 0;
    for (scope, dir) in scopes {
        let Ok(files) = list_directory(&dir).await else {
            continue;
        };
        for file in files {
            // What was being written when the earlier manager stopped.
            if file.path.starts_with("tmp/") || file.path.starts_with(".partial-") {
                continue;
            }
            let local = dir.join(&file.path);
            if store.read_file(&scope, &file.path, 0, 0).await?.is_some() {
                tracing::warn!(file = %local.display(), "not moved into the database, which holds another copy");
                continue;
            }
            let opened = match tokio::fs::File::open(&local).await {
                Ok(opened) => opened,
                Err(e) => {
                    tracing::warn!(file = %local.display(), error = %e, "not moved into the database");
                    continue;
                }
            };
            store.put_file(&scope, &file.path, opened).await?;
            if let Err(e) = tokio::fs::remove_file(&local).await {
                tracing::warn!(file = %local.display(), error = %e, "moved into the database, but not removed");
            }
            moved += 1;
        }
    }
    Ok(moved)
}
