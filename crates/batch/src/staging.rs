//! A job's files on the file system the manager and the cluster's nodes share: its directory
//! made, its inputs written, its outputs listed and read. Every step is a command run as the
//! binding's account ([`Commands`]), so the manager reads and writes only what the jobs' account
//! could; and an output is read only if it resolves inside the job's directory, so a job cannot
//! hand over another's files by a link. What the manager reads is bounded: a listing to
//! [`MAX_LISTED`] files, a file to a cap the caller gives, checked before reading and held to
//! while reading, and streamed rather than collected ([`open`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader, ReadBuf, Take};

use crate::{args, BatchError, Commands, Reading};

/// The most files a listing of a job's outputs holds; a job with more is answered as such
/// ([`Listing::more`]), not listed whole.
pub const MAX_LISTED: usize = 10_000;

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
/// each with its size in bytes, relative to `dir`: at most `max` of them (see [`MAX_LISTED`]).
pub async fn list(
    commands: &Commands,
    dir: &str,
    paths: &[String],
    max: usize,
) -> Result<Listing, BatchError> {
    if paths.is_empty() {
        return Ok(Listing::default());
    }
    // Paths that are not there are simply not listed. One line more than the bound says there
    // are more; `head` ends `find` there, so a huge tree is neither walked nor held.
    const SCRIPT: &str = r#"cd -- "$1" || exit 1; l=$2; shift 2
find "$@" -type f -printf '%s\t%p\n' 2>/dev/null | head -n "$l"; exit 0"#;
    let lines = (max.saturating_add(1)).to_string();
    let mut words = args(["-c", SCRIPT, "sh", dir, &lines]);
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
    let more = files.len() > max;
    files.truncate(max);
    files.sort();
    Ok(Listing { files, more })
}

/// A job's output files as [`list`] found them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Paths relative to the job's directory, with their sizes in bytes, sorted.
    pub files: Vec<(String, u64)>,
    /// There are more files than the bound: `files` are some of them.
    pub more: bool,
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

/// `dir/path` opened for reading, if it is a file that resolves inside `dir` of at most `max`
/// bytes: its size is read (as the binding's account, from the file opened) before any of its
/// bytes, and no more than that size is read even if it grows meanwhile.
pub async fn open(
    commands: &Commands,
    dir: &str,
    path: &str,
    max: u64,
) -> Result<Output, BatchError> {
    const NOT_THERE: i32 = 3;
    // Opened once: the size is that of the file read, not of one put in its place after.
    const SCRIPT: &str = r#"d=$(realpath -e -- "$1") && f=$(realpath -e -- "$1/$2") || exit 3
[ -f "$f" ] || exit 3
case "$f" in "$d"/*) ;; *) exit 3 ;; esac
exec <"$f" || exit 1
s=$(stat -L -c %s /dev/stdin) || exit 1
printf '%s\n' "$s"
[ "$s" -le "$3" ] || exit 0
exec head -c "$s""#;
    // As the shell's `[` can compare it.
    let max_text = max.min(i64::MAX as u64).to_string();
    let (mut reading, stdout) =
        tools(commands).start_reading("sh", &args(["-c", SCRIPT, "sh", dir, path, &max_text]))?;
    let mut stdout = BufReader::new(stdout);
    let mut line = Vec::new();
    let header = async {
        (&mut stdout)
            .take(32)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|source| BatchError::Io {
                command: "sh".into(),
                source,
            })
    };
    match tokio::time::timeout(commands.timeout, header).await {
        Ok(result) => result?,
        Err(_) => {
            return Err(BatchError::Timeout {
                command: "reading an output".into(),
                secs: commands.timeout.as_secs(),
            })
        }
    };
    if line.is_empty() {
        // No size: the script stopped before reading anything; its status says why.
        let (code, stderr) = reading.finish(commands.timeout).await?;
        return match code {
            Some(NOT_THERE) => Ok(Output::Missing),
            _ => Err(BatchError::Staging {
                what: "reading an output".into(),
                message: String::from_utf8_lossy(&stderr).trim().to_string(),
            }),
        };
    }
    let text = String::from_utf8_lossy(&line);
    let size: u64 = text
        .trim_end()
        .parse()
        .map_err(|_| BatchError::parse("stat", "not a size", &text))?;
    if size > max {
        // The script stopped there; dropping `reading` ends it if it has not yet.
        return Ok(Output::TooLarge { size });
    }
    Ok(Output::File(Box::new(OutputFile {
        size,
        read: 0,
        bytes: stdout.take(size),
        _reading: reading,
    })))
}

/// What [`open`] found.
#[derive(Debug)]
pub enum Output {
    /// Not a file that resolves inside the job's directory.
    Missing,
    /// Larger than the cap: nothing of it was read.
    TooLarge {
        size: u64,
    },
    File(Box<OutputFile>),
}

/// An output file being read: its bytes as they come, exactly `size` of them (one that shrank
/// meanwhile ends in an error rather than short).
#[derive(Debug)]
pub struct OutputFile {
    pub size: u64,
    read: u64,
    bytes: Take<BufReader<tokio::process::ChildStdout>>,
    /// The command reading it, killed when this is dropped.
    _reading: Reading,
}

impl OutputFile {
    /// All of it (the caller's cap bounds it).
    pub async fn bytes(mut self) -> Result<Vec<u8>, BatchError> {
        let mut data = Vec::with_capacity(usize::try_from(self.size).unwrap_or(0).min(1 << 20));
        self.read_to_end(&mut data)
            .await
            .map_err(|e| BatchError::Staging {
                what: "reading an output".into(),
                message: e.to_string(),
            })?;
        Ok(data)
    }
}

impl OutputFile {
    /// Its next bytes, at most `max` of them; `None` once all were read.
    pub async fn next_chunk(&mut self, max: usize) -> std::io::Result<Option<Vec<u8>>> {
        let mut chunk = vec![0; max];
        let n = self.read(&mut chunk).await?;
        chunk.truncate(n);
        Ok((n > 0).then_some(chunk))
    }
}

impl AsyncRead for OutputFile {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.bytes).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let got = (buf.filled().len() - before) as u64;
                this.read += got;
                if got == 0 && this.read < this.size {
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "the output ended after {} of its {} bytes",
                            this.read, this.size
                        ),
                    )));
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
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

    #[tokio::test]
    async fn an_output_over_the_cap_is_refused_before_any_of_it_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        // 300 MiB, sparse: nothing of it on disk.
        let big = std::fs::File::create(tmp.path().join("big")).unwrap();
        big.set_len(300 << 20).unwrap();
        let dir = tmp.path().to_str().unwrap();
        let commands = Commands::default();
        match open(&commands, dir, "big", 256 << 20).await.unwrap() {
            Output::TooLarge { size } => assert_eq!(size, 300 << 20),
            other => panic!("not refused: {other:?}"),
        }
        assert!(matches!(
            open(&commands, dir, "none", 256 << 20).await.unwrap(),
            Output::Missing
        ));
    }

    #[tokio::test]
    async fn an_output_is_read_as_it_comes_and_no_further_than_its_size_when_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("job");
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("out.bin");
        // 20 MiB of a pattern, to check every byte.
        let data: Vec<u8> = (0..20u32 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        std::fs::write(tmp.path().join("secret"), b"not yours").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret"), dir.join("link")).unwrap();
        let commands = Commands::default();
        let dir = dir.to_str().unwrap();
        let Output::File(mut file) = open(&commands, dir, "out.bin", 256 << 20).await.unwrap()
        else {
            panic!("not opened");
        };
        assert_eq!(file.size, data.len() as u64);
        // It grows after it was opened: what is read stops at the size it had.
        {
            use std::io::Write;
            let mut more = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            more.write_all(&[7; 4096]).unwrap();
        }
        let mut got = Vec::new();
        let mut reads = 0;
        let mut chunk = vec![0; 64 << 10];
        loop {
            let n = file.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            reads += 1;
            got.extend_from_slice(&chunk[..n]);
        }
        assert!(
            got == data,
            "{} bytes read, {} written",
            got.len(),
            data.len()
        );
        assert!(reads > 1, "read in pieces");
        assert!(
            matches!(
                open(&commands, dir, "link", 256 << 20).await.unwrap(),
                Output::Missing
            ),
            "leads outside"
        );
    }

    #[tokio::test]
    async fn a_listing_stops_at_its_bound_and_says_there_is_more() {
        let tmp = tempfile::tempdir().unwrap();
        let many = tmp.path().join("many");
        std::fs::create_dir(&many).unwrap();
        for i in 0..25 {
            std::fs::write(many.join(format!("f{i:02}")), b"x").unwrap();
        }
        std::fs::write(tmp.path().join("one"), b"hello").unwrap();
        let commands = Commands::default();
        let dir = tmp.path().to_str().unwrap();
        let all = list(&commands, dir, &["one".into(), "many".into()], 100)
            .await
            .unwrap();
        assert_eq!(all.files.len(), 26);
        assert!(!all.more);
        assert!(all.files.contains(&("one".to_string(), 5)));
        let some = list(&commands, dir, &["many".into()], 10).await.unwrap();
        assert_eq!(some.files.len(), 10);
        assert!(some.more);
        let exact = list(&commands, dir, &["many".into()], 25).await.unwrap();
        assert_eq!((exact.files.len(), exact.more), (25, false));
    }
}
