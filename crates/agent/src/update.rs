//! Updating itself to the build its sync named (docs/agent-update.md): download it beside its
//! own binary, check its size and SHA-256, check that it starts and says the version it was
//! ordered as, put it in place of the binary in one rename, and execute it with the same
//! arguments and its token, so that it joins again as itself. Anything that fails before the
//! rename changes nothing; after it, only the start itself can fail, and then the previous
//! binary is put back.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_api::agent_builds::UpdateOrder;
use corral_api::Client;
use tokio::io::AsyncWriteExt;

/// The new process reads the agent's own token from the pipe this names (a descriptor
/// number), so that it joins again with it: a bootstrap token may be spent. A pipe, not the
/// environment: `/proc/<pid>/environ` keeps what a process was started with.
pub const RESUME_FD_ENV: &str = "CORRAL_AGENT_RESUME_FD";
/// Where builds before [`RESUME_FD_ENV`] passed the token; still read from them (and removed
/// from the environment).
pub const RESUME_TOKEN_ENV: &str = "CORRAL_AGENT_RESUME_TOKEN";
/// The longest token read from the pipe.
const RESUME_TOKEN_MAX: u64 = 4096;

/// Reads the token from the pipe descriptor `fd` (as [`RESUME_FD_ENV`] gives it) and closes it.
pub fn read_resume_pipe(fd: &str) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let fd: i32 = fd
        .trim()
        .parse()
        .ok()
        .filter(|fd| *fd > 2)
        .ok_or_else(|| std::io::Error::other(format!("{fd:?} is not a descriptor")))?;
    // It must be a pipe: a number pointing at anything else is not taken over.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st` only.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return Err(std::io::Error::other(format!(
            "descriptor {fd} is not a pipe"
        )));
    }
    // SAFETY: the descriptor was handed to this process to be read and closed, once.
    let pipe = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut token = String::new();
    pipe.take(RESUME_TOKEN_MAX).read_to_string(&mut token)?;
    Ok(token.trim().to_string())
}
/// How long a new build gets to say its version.
const START_CHECK: Duration = Duration::from_secs(30);

/// How this agent was started, so that it can start its update the same way.
#[derive(Debug, Clone)]
pub struct SelfUpdate {
    /// Its binary: the file replaced.
    pub exe: PathBuf,
    /// Its arguments, without the program's name.
    pub args: Vec<OsString>,
}

/// Updates to `order`'s build and executes it; returns only if that failed, with the reason
/// (the agent runs on as it was).
pub(crate) async fn apply(
    me: &SelfUpdate,
    client: &Client,
    order: &UpdateOrder,
) -> Result<std::convert::Infallible, String> {
    // The version names a file beside the binary.
    if !corral_core::agent_update::is_version(&order.version) {
        return Err(format!("{:?} is not a version", order.version));
    }
    let here = corral_api::agent_builds::platform();
    if order.platform != here {
        return Err(format!(
            "the build is for {}, and this agent runs on {here}",
            order.platform
        ));
    }
    let dir = me
        .exe
        .parent()
        .ok_or_else(|| format!("{} has no directory", me.exe.display()))?;
    let name = me
        .exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "corral".into());
    let partial = dir.join(format!(".{name}.{}.partial", order.version));
    let checked = async {
        download(client, order, &partial).await?;
        check_starts(&partial, &order.version).await
    }
    .await;
    if let Err(why) = checked {
        let _ = std::fs::remove_file(&partial);
        return Err(why);
    }
    // The binary it replaces stays beside it, to go back to by hand (and by the agent, if
    // the new one cannot be executed).
    let previous = dir.join(format!(".{name}.previous"));
    let _ = std::fs::remove_file(&previous);
    let kept = std::fs::hard_link(&me.exe, &previous).is_ok();
    if let Err(e) = std::fs::rename(&partial, &me.exe) {
        let _ = std::fs::remove_file(&partial);
        return Err(format!(
            "could not put it in place of {}: {e}",
            me.exe.display()
        ));
    }
    sync_dir(dir);
    tracing::info!(version = order.version, "updated; starting the new build");
    let error = exec(me, client.token());
    // Still here: the new build could not be executed. Back to the old one.
    if kept {
        let _ = std::fs::rename(&previous, &me.exe);
        sync_dir(dir);
    }
    Err(format!("could not execute the new build: {error}"))
}

/// Downloads the build to `partial` (created new, mode 0755 once whole), checking its size
/// and digest, and syncs it to disk.
async fn download(client: &Client, order: &UpdateOrder, partial: &Path) -> Result<(), String> {
    let _ = std::fs::remove_file(partial);
    let io = |e: std::io::Error| format!("{}: {e}", partial.display());
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(partial)
        .await
        .map_err(io)?;
    let mut download = client
        .download_agent_build(&order.version, &order.platform)
        .await
        .map_err(|e| format!("could not download it: {e}"))?;
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    let mut size = 0u64;
    while let Some(piece) = download
        .chunk()
        .await
        .map_err(|e| format!("the download broke off: {e}"))?
    {
        size += piece.len() as u64;
        if size > order.size {
            return Err(format!(
                "the download is longer than the build's {} bytes",
                order.size
            ));
        }
        digest.update(&piece);
        file.write_all(&piece).await.map_err(io)?;
    }
    let sha256 = hex::encode(digest.finish());
    if size != order.size || sha256 != order.sha256 {
        return Err(format!(
            "the download is corrupt: {size} bytes of SHA-256 {sha256}, where the build has \
             {} bytes of SHA-256 {}",
            order.size, order.sha256
        ));
    }
    file.sync_all().await.map_err(io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tokio::fs::set_permissions(partial, std::fs::Permissions::from_mode(0o755))
            .await
            .map_err(io)?;
    }
    Ok(())
}

/// The build starts and says it is `version` (`corral --version` prints `corral VERSION`).
async fn check_starts(build: &Path, version: &str) -> Result<(), String> {
    let run = tokio::process::Command::new(build)
        .arg("--version")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(START_CHECK, run)
        .await
        .map_err(|_| {
            format!(
                "the build did not say its version within {} s",
                START_CHECK.as_secs()
            )
        })?
        .map_err(|e| format!("the build does not start: {e}"))?;
    let said = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if !output.status.success() || said != format!("corral {version}") {
        return Err(format!(
            "the build does not start as version {version}: `--version` {} and said {said:?}",
            output.status
        ));
    }
    Ok(())
}

/// Makes a rename in `dir` last through a crash.
fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(unix)]
fn exec(me: &SelfUpdate, token: &str) -> std::io::Error {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    // The token waits in a pipe whose read end alone survives the exec; it fits the pipe's
    // buffer, so the write never blocks.
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return std::io::Error::last_os_error();
    }
    // SAFETY: both descriptors were just made and are owned here alone.
    let (read_end, mut write_end) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::os::fd::OwnedFd::from_raw_fd(ends[0]),
            std::fs::File::from_raw_fd(ends[1]),
        )
    };
    if let Err(e) = write_end.write_all(token.as_bytes()) {
        return e;
    }
    drop(write_end);
    let fd = read_end.as_raw_fd();
    // SAFETY: fcntl on a descriptor owned here: it is to survive the exec.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
        return std::io::Error::last_os_error();
    }
    let error = std::process::Command::new(&me.exe)
        .args(&me.args)
        .env(RESUME_FD_ENV, fd.to_string())
        .env_remove(RESUME_TOKEN_ENV)
        .exec();
    drop(read_end);
    error
}

#[cfg(not(unix))]
fn exec(_: &SelfUpdate, _: &str) -> std::io::Error {
    std::io::Error::other("an agent updates itself on Unix only")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::{FromRawFd, IntoRawFd};

    #[test]
    fn the_token_is_read_from_a_pipe_and_nothing_else() {
        let mut ends = [0; 2];
        // SAFETY: pipe2 writes two descriptors into `ends`.
        assert_eq!(
            unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) },
            0
        );
        // SAFETY: the write end was just made and is owned here alone.
        let mut write_end = unsafe { std::fs::File::from_raw_fd(ends[1]) };
        write_end.write_all(b"corral_abc\n").unwrap();
        drop(write_end);
        assert_eq!(
            read_resume_pipe(&ends[0].to_string()).unwrap(),
            "corral_abc"
        );
        // A descriptor of a file, standard input and garbage are not taken.
        let file = tempfile::tempfile().unwrap().into_raw_fd();
        assert!(read_resume_pipe(&file.to_string()).is_err());
        assert!(read_resume_pipe("0").is_err());
        assert!(read_resume_pipe("x").is_err());
    }
}
