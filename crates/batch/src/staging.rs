//! A job's files on the file system the manager and the cluster's nodes share: its directory
//! made, its inputs written, its outputs listed and read. Every step is a command run as the
//! binding's account ([`Commands`]), so the manager reads and writes only what the jobs' account
//! could; and an output is read only if it resolves inside the job's directory, so a job cannot
//! hand over another's files by a link.

use crate::{args, BatchError, Commands};

/// Makes `dir` and its parents, `dir` readable by its owner only.
pub async fn make_dir(commands: &Commands, dir: &str) -> Result<(), BatchError> {
    let answer = tools(commands)
        .run_bytes("mkdir", &args(["-p", "-m", "0700", "--", dir]), None)
        .await?;
    check("mkdir", answer).map(drop)
}

/// Writes `data` to `dir/path` whole (beside it first, then renamed), making its parents.
pub async fn write(
    commands: &Commands,
    dir: &str,
    path: &str,
    data: &[u8],
) -> Result<(), BatchError> {
    const SCRIPT: &str = r#"set -e; umask 077; cd -- "$1"; mkdir -p -- "$(dirname -- "$2")"
cat > "$2.corral-partial"; mv -f -- "$2.corral-partial" "$2""#;
    let answer = tools(commands)
        .run_bytes("sh", &args(["-c", SCRIPT, "sh", dir, path]), Some(data))
        .await?;
    check("writing an input", answer).map(drop)
}

/// The files under `paths` in `dir` (files, and the files of directories, links left out),
/// each with its size in bytes, relative to `dir`.
pub async fn list(
    commands: &Commands,
    dir: &str,
    paths: &[String],
) -> Result<Vec<(String, u64)>, BatchError> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    // Paths that are not there are simply not listed.
    const SCRIPT: &str = r#"cd -- "$1" || exit 1; shift
find "$@" -type f -printf '%s\t%p\n' 2>/dev/null; exit 0"#;
    let mut words = args(["-c", SCRIPT, "sh", dir]);
    words.extend(paths.iter().map(|p| format!("./{p}")));
    let answer = tools(commands).run_bytes("sh", &words, None).await?;
    let text = String::from_utf8_lossy(&check("listing outputs", answer)?).into_owned();
    let mut files = Vec::new();
    for line in text.lines() {
        let parsed = line.split_once('\t').and_then(|(size, path)| {
            Some((path.strip_prefix("./")?.to_string(), size.parse().ok()?))
        });
        files.push(parsed.ok_or_else(|| BatchError::parse("find", "not SIZE<tab>PATH", line))?);
    }
    files.sort();
    Ok(files)
}

/// Of `paths`, those not in `dir`.
pub async fn missing(
    commands: &Commands,
    dir: &str,
    paths: &[String],
) -> Result<Vec<String>, BatchError> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    const SCRIPT: &str = r#"cd -- "$1" || exit 1; shift
for p; do [ -e "./$p" ] || printf '%s\n' "$p"; done"#;
    let mut words = args(["-c", SCRIPT, "sh", dir]);
    words.extend(paths.iter().cloned());
    let answer = tools(commands).run_bytes("sh", &words, None).await?;
    let text = String::from_utf8_lossy(&check("looking for outputs", answer)?).into_owned();
    Ok(text.lines().map(str::to_string).collect())
}

/// The bytes of `dir/path`; `None` when it is not a file that resolves inside `dir`.
pub async fn read(
    commands: &Commands,
    dir: &str,
    path: &str,
) -> Result<Option<Vec<u8>>, BatchError> {
    const NOT_THERE: i32 = 3;
    const SCRIPT: &str = r#"d=$(realpath -e -- "$1") && f=$(realpath -e -- "$1/$2") || exit 3
[ -f "$f" ] || exit 3
case "$f" in "$d"/*) exec cat -- "$f" ;; *) exit 3 ;; esac"#;
    let (code, stdout, stderr) = tools(commands)
        .run_bytes("sh", &args(["-c", SCRIPT, "sh", dir, path]), None)
        .await?;
    match code {
        Some(0) => Ok(Some(stdout)),
        Some(NOT_THERE) => Ok(None),
        _ => check("reading an output", (code, stdout, stderr)).map(|_| None),
    }
}

/// At most `max` bytes of `dir/path` from byte `offset` (a log followed as it grows); `None`
/// when it is not a file that resolves inside `dir`.
pub async fn read_from(
    commands: &Commands,
    dir: &str,
    path: &str,
    offset: u64,
    max: u64,
) -> Result<Option<Vec<u8>>, BatchError> {
    const NOT_THERE: i32 = 3;
    const SCRIPT: &str = r#"d=$(realpath -e -- "$1") && f=$(realpath -e -- "$1/$2") || exit 3
[ -f "$f" ] || exit 3
case "$f" in "$d"/*) ;; *) exit 3 ;; esac
tail -c "+$(($3 + 1))" -- "$f" | head -c "$4""#;
    let (offset, max) = (offset.to_string(), max.to_string());
    let (code, stdout, stderr) = tools(commands)
        .run_bytes(
            "sh",
            &args(["-c", SCRIPT, "sh", dir, path, &offset, &max]),
            None,
        )
        .await?;
    match code {
        Some(0) => Ok(Some(stdout)),
        Some(NOT_THERE) => Ok(None),
        _ => check("reading a log", (code, stdout, stderr)).map(|_| None),
    }
}

/// The system's `sh`, `mkdir`, `find`, `realpath` and `cat`, not the scheduler's directory's,
/// run as the binding's account.
fn tools(commands: &Commands) -> Commands {
    Commands {
        bin_dir: None,
        ..commands.clone()
    }
}

/// A command's output, or its failure in its words.
fn check(
    what: &str,
    (code, stdout, stderr): (Option<i32>, Vec<u8>, Vec<u8>),
) -> Result<Vec<u8>, BatchError> {
    if code == Some(0) {
        Ok(stdout)
    } else {
        Err(BatchError::Staging {
            what: what.to_string(),
            message: String::from_utf8_lossy(&stderr).trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_log_is_read_from_an_offset_and_only_inside_its_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("job");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("stdout"), b"hello world\n").unwrap();
        std::fs::write(tmp.path().join("secret"), b"not yours").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret"), dir.join("link")).unwrap();
        let commands = Commands::default();
        let dir = dir.to_str().unwrap();
        let read = |path: &'static str, offset, max| read_from(&commands, dir, path, offset, max);
        assert_eq!(read("stdout", 0, 5).await.unwrap().unwrap(), b"hello");
        assert_eq!(read("stdout", 6, 100).await.unwrap().unwrap(), b"world\n");
        assert_eq!(read("stdout", 50, 100).await.unwrap().unwrap(), b"");
        assert_eq!(
            read("stderr", 0, 100).await.unwrap(),
            None,
            "not written yet"
        );
        assert_eq!(read("link", 0, 100).await.unwrap(), None, "leads outside");
    }
}
