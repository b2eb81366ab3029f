//! Output paths: checking that they stay inside the work directory, and copying them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::{RuntimeError, SessionSpec};

/// An output path as a session path (`corral_core::paths`): one that leads out of the work
/// directory is refused as escaping, any other malformed one as an invalid spec.
pub(crate) fn relative_output(id: &str, path: &str) -> Result<PathBuf, RuntimeError> {
    corral_core::paths::session_path(path)
        .map(Path::to_path_buf)
        .map_err(|why| {
            if why.leaves() {
                RuntimeError::OutputEscapes {
                    id: id.to_string(),
                    path: path.to_string(),
                }
            } else {
                RuntimeError::InvalidSpec {
                    id: id.to_string(),
                    reason: format!("output {path:?} {why}"),
                }
            }
        })
}

/// Checks every output path of a spec, so nothing is copied unless all are acceptable.
pub(crate) fn validate_outputs(spec: &SessionSpec) -> Result<Vec<PathBuf>, RuntimeError> {
    spec.outputs
        .iter()
        .map(|p| relative_output(&spec.id, p))
        .collect()
}

/// Copies `work/<rel>` into `outputs/<rel>` for each output (blocking). Symbolic links are
/// resolved only while they stay inside the work directory; one that leads out is refused, and
/// links met inside a copied directory are skipped.
pub(crate) fn copy_outputs(
    id: &str,
    outputs: &[String],
    work: &Path,
    dest_root: &Path,
) -> Result<Vec<PathBuf>, RuntimeError> {
    let rels: Vec<PathBuf> = outputs
        .iter()
        .map(|p| relative_output(id, p))
        .collect::<Result<_, _>>()?;
    let work_real = fs::canonicalize(work)
        .map_err(|e| RuntimeError::io(format!("work directory {}", work.display()), e))?;
    // Resolve everything first, so an escaping link refuses the whole collection.
    let mut sources = Vec::new();
    for (rel, given) in rels.iter().zip(outputs) {
        let src = work.join(rel);
        let real = match fs::canonicalize(&src) {
            Ok(real) => real,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tracing::warn!(session = id, output = %given, "output not found; skipped");
                continue;
            }
            Err(e) => return Err(RuntimeError::io(format!("output {}", src.display()), e)),
        };
        if !real.starts_with(&work_real) {
            return Err(RuntimeError::OutputEscapes {
                id: id.to_string(),
                path: given.clone(),
            });
        }
        sources.push((real, rel));
    }
    let mut collected = Vec::new();
    for (real, rel) in sources {
        let dest = dest_root.join(rel);
        copy_tree(id, &real, &dest)
            .map_err(|e| RuntimeError::io(format!("copying output {}", rel.display()), e))?;
        collected.push(dest);
    }
    Ok(collected)
}

/// Copies a file or a directory tree, skipping symbolic links and special files inside it.
fn copy_tree(id: &str, src: &Path, dest: &Path) -> io::Result<()> {
    let meta = fs::metadata(src)?;
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)?;
    }
    if meta.is_file() {
        fs::copy(src, dest)?;
        return Ok(());
    }
    if !meta.is_dir() {
        tracing::warn!(session = id, path = %src.display(), "not a file or directory; skipped");
        return Ok(());
    }
    fs::create_dir_all(dest)?;
    for entry in fs::read_dir(src)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let from = entry.path();
        let to = dest.join(entry.file_name());
        if kind.is_symlink() {
            tracing::warn!(session = id, path = %from.display(), "symbolic link in output; skipped");
        } else if kind.is_dir() {
            copy_tree(id, &from, &to)?;
        } else if kind.is_file() {
            fs::copy(&from, &to)?;
        } else {
            tracing::warn!(session = id, path = %from.display(), "not a file or directory; skipped");
        }
    }
    Ok(())
}

/// Unpacks a tar archive from Docker's archive API into `dest` (blocking). Only regular files
/// and directories are written; links and special files are skipped, and the tar crate refuses
/// entries that would land outside `dest`.
pub(crate) fn unpack_archive(id: &str, archive: &Path, dest: &Path) -> io::Result<()> {
    fs::create_dir_all(dest)?;
    let mut tar = tar::Archive::new(fs::File::open(archive)?);
    for entry in tar.entries()? {
        let mut entry = entry?;
        let kind = entry.header().entry_type();
        if kind.is_file() || kind.is_dir() {
            if !entry.unpack_in(dest)? {
                tracing::warn!(session = id, path = %entry.path()?.display(), "archive entry outside the output directory; skipped");
            }
        } else if !kind.is_pax_global_extensions() && !kind.is_pax_local_extensions() {
            tracing::warn!(session = id, path = %entry.path()?.display(), "link or special file in output; skipped");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_leave_are_refused() {
        for bad in ["../x", "/etc/passwd", "a/../../x", "a/.."] {
            assert!(
                matches!(
                    relative_output("s", bad),
                    Err(RuntimeError::OutputEscapes { .. })
                ),
                "{bad:?} accepted"
            );
        }
        for malformed in [".", "./a/./b.txt", "a//b", ""] {
            assert!(
                matches!(
                    relative_output("s", malformed),
                    Err(RuntimeError::InvalidSpec { .. })
                ),
                "{malformed:?} accepted"
            );
        }
        assert_eq!(
            relative_output("s", "a/b.txt").unwrap(),
            PathBuf::from("a/b.txt")
        );
    }

    #[test]
    fn a_link_out_of_the_work_dir_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        fs::create_dir_all(&work).unwrap();
        fs::write(tmp.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret"), work.join("link")).unwrap();
        fs::write(work.join("ok.txt"), "ok").unwrap();
        let err = copy_outputs(
            "s",
            &["ok.txt".into(), "link".into()],
            &work,
            &tmp.path().join("out"),
        )
        .unwrap_err();
        assert!(matches!(err, RuntimeError::OutputEscapes { .. }), "{err}");
        assert!(!tmp.path().join("out/ok.txt").exists());
    }
}
