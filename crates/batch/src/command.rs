//! Running a scheduler's command: in a process group of its own, with a timeout after which it
//! and whatever it started are killed, its output read in full. One place, so every adaptor
//! answers a missing command, a hang and a refusal the same way.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::BatchError;

/// How an adaptor runs its commands.
#[derive(Debug, Clone)]
pub struct Commands {
    /// Where the scheduler's commands are [default: PATH].
    pub bin_dir: Option<PathBuf>,
    /// The longest one command may take.
    pub timeout: Duration,
    /// Variables set for every command (`SGE_ROOT`, `SLURM_CONF`).
    pub env: Vec<(String, String)>,
    /// The Unix account the commands run as, so that jobs run as it and not as the manager
    /// (`runuser -u` when the manager is root, else `sudo -n -u`); none: the manager's own.
    pub run_as: Option<String>,
}

impl Default for Commands {
    fn default() -> Self {
        Commands {
            bin_dir: None,
            timeout: Duration::from_secs(30),
            env: Vec::new(),
            run_as: None,
        }
    }
}

/// What a command answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// What the command said went wrong: its standard error, or else its output.
    pub fn complaint(&self) -> String {
        let text = if self.stderr.trim().is_empty() {
            &self.stdout
        } else {
            &self.stderr
        };
        text.trim().to_string()
    }

    /// Why an action on job `id` failed: the job is unknown when the complaint says one of
    /// `unknown` (each scheduler words it its own way), else the scheduler refused, in its words.
    pub fn refusal(&self, scheduler: &'static str, id: &str, unknown: &[&str]) -> BatchError {
        let message = self.complaint();
        if unknown.iter().any(|u| message.contains(u)) {
            BatchError::NoSuchJob { id: id.into() }
        } else {
            BatchError::Refused { scheduler, message }
        }
    }
}

impl Commands {
    /// The same, as the manager's own account: for an operator's changes, which the jobs'
    /// account may not make.
    pub fn own(&self) -> Commands {
        Commands {
            run_as: None,
            ..self.clone()
        }
    }

    /// Runs `program args`, with `input` on its standard input (as `run_as`, if set).
    pub async fn run(
        &self,
        program: &str,
        args: &[String],
        input: Option<&str>,
    ) -> Result<Answer, BatchError> {
        let (code, stdout, stderr) = self
            .run_bytes(program, args, input.map(str::as_bytes))
            .await?;
        Ok(Answer {
            code,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }

    /// [`Commands::run`] with bytes in and out (files staged and collected): the exit code,
    /// standard output and standard error.
    pub async fn run_bytes(
        &self,
        program: &str,
        args: &[String],
        input: Option<&[u8]>,
    ) -> Result<(Option<i32>, Vec<u8>, Vec<u8>), BatchError> {
        let path = self.path(program);
        let io = |source| BatchError::Io {
            command: program.to_string(),
            source,
        };
        let mut child = self.spawn(program, args, input.is_some())?;
        let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
            let data = data.to_vec();
            // A command that exits without reading all of it is answered by its exit status.
            tokio::spawn(async move {
                let _ = stdin.write_all(&data).await;
            });
        }
        match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            // `env` under `runuser` or `sudo` found no such program.
            Ok(Ok(output)) if self.run_as.is_some() && output.status.code() == Some(127) => {
                Err(BatchError::CommandMissing {
                    command: path.display().to_string(),
                })
            }
            Ok(Ok(output)) => Ok((output.status.code(), output.stdout, output.stderr)),
            Ok(Err(e)) => Err(io(e)),
            Err(_) => {
                // The child itself was killed when its future was dropped; now its group.
                let _ = corral_runtime::procfs::signal_group(pgid, libc::SIGKILL);
                Err(BatchError::Timeout {
                    command: program.to_string(),
                    secs: self.timeout.as_secs(),
                })
            }
        }
    }

    fn path(&self, program: &str) -> PathBuf {
        match &self.bin_dir {
            Some(dir) => dir.join(program),
            None => PathBuf::from(program),
        }
    }

    /// Starts `program args` (as `run_as`, if set) with its output piped, in a process group
    /// of its own, killed if dropped.
    fn spawn(
        &self,
        program: &str,
        args: &[String],
        input: bool,
    ) -> Result<tokio::process::Child, BatchError> {
        let path = self.path(program);
        let mut command = match &self.run_as {
            None => {
                let mut command = tokio::process::Command::new(&path);
                command.args(args);
                command
            }
            Some(account) => as_account(account, &self.env, &path, args),
        };
        // Nothing of the manager's environment but PATH: schedulers pass the submitter's
        // environment on to the job (sbatch's --export=ALL, bsub), and the manager's may hold
        // its secrets key.
        command
            .env_clear()
            .envs(std::env::var_os("PATH").map(|path| ("PATH", path)))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(if input { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so that a timeout kills what it started too.
            .process_group(0)
            .kill_on_drop(true);
        command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BatchError::CommandMissing {
                command: path.display().to_string(),
            },
            _ => BatchError::Io {
                command: program.to_string(),
                source: e,
            },
        })
    }

    /// Starts `program args` (as `run_as`, if set) for its output to be read as it comes,
    /// rather than collected: its standard output, and the [`Reading`] that kills it and what
    /// it started when dropped. No timeout: the reader decides how long to wait.
    pub fn start_reading(
        &self,
        program: &str,
        args: &[String],
    ) -> Result<(Reading, tokio::process::ChildStdout), BatchError> {
        let mut child = self.spawn(program, args, false)?;
        let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(BatchError::Io {
                command: program.to_string(),
                source: std::io::Error::other("no pipe to the command"),
            });
        };
        let reading = Reading {
            program: program.to_string(),
            run_as: self.run_as.is_some(),
            path: self.path(program),
            child,
            pgid,
            stderr: Some(stderr),
        };
        Ok((reading, stdout))
    }

    /// Runs a command that must succeed; a failure is the scheduler refusing, in its words.
    pub async fn run_ok(
        &self,
        scheduler: &'static str,
        program: &str,
        args: &[String],
        input: Option<&str>,
    ) -> Result<String, BatchError> {
        let answer = self.run(program, args, input).await?;
        if answer.ok() {
            Ok(answer.stdout)
        } else {
            Err(BatchError::Refused {
                scheduler,
                message: answer.complaint(),
            })
        }
    }
}

/// A command started by [`Commands::start_reading`], whose standard output is read as it
/// comes. Dropped, it is killed with its process group (a client that went away stops it).
#[derive(Debug)]
pub struct Reading {
    program: String,
    run_as: bool,
    path: PathBuf,
    child: tokio::process::Child,
    pgid: i32,
    stderr: Option<tokio::process::ChildStderr>,
}

impl Reading {
    /// Waits (up to `timeout`) for the command to end: its exit code (`None`: killed by a
    /// signal) and the start of its standard error.
    pub async fn finish(
        &mut self,
        timeout: Duration,
    ) -> Result<(Option<i32>, Vec<u8>), BatchError> {
        use tokio::io::AsyncReadExt;
        let mut stderr = Vec::new();
        let io = |source| BatchError::Io {
            command: self.program.clone(),
            source,
        };
        let ended = async {
            if let Some(pipe) = self.stderr.take() {
                // Enough to say what went wrong; the rest is not kept.
                pipe.take(64 << 10).read_to_end(&mut stderr).await?;
            }
            self.child.wait().await
        };
        match tokio::time::timeout(timeout, ended).await {
            Ok(Ok(status)) if self.run_as && status.code() == Some(127) => {
                Err(BatchError::CommandMissing {
                    command: self.path.display().to_string(),
                })
            }
            Ok(Ok(status)) => Ok((status.code(), stderr)),
            Ok(Err(e)) => Err(io(e)),
            Err(_) => Err(BatchError::Timeout {
                command: self.program.clone(),
                secs: timeout.as_secs(),
            }),
        }
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        // The child itself is killed on drop; what it started, with its group.
        if self.pgid > 0 && matches!(self.child.try_wait(), Ok(None)) {
            let _ = corral_runtime::procfs::signal_group(self.pgid, libc::SIGKILL);
        }
    }
}

/// `program args` run as `account`: `runuser -u ACCOUNT -- env K=V... PROGRAM ARGS` when this
/// process is root, else `sudo -n -u ACCOUNT -- env ...` (`-n`: fail rather than ask for a
/// password). The variables go through `env`, which sudo would otherwise reset.
fn as_account(
    account: &str,
    env: &[(String, String)],
    program: &std::path::Path,
    args: &[String],
) -> tokio::process::Command {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut command = if root {
        let mut c = tokio::process::Command::new("runuser");
        c.args(["-u", account, "--"]);
        c
    } else {
        let mut c = tokio::process::Command::new("sudo");
        c.args(["-n", "-u", account, "--"]);
        c
    };
    command
        .arg("env")
        .args(env.iter().map(|(k, v)| format!("{k}={v}")))
        .arg(program)
        .args(args);
    command
}

/// `["a", "b"]` as owned arguments.
pub fn args<const N: usize>(list: [&str; N]) -> Vec<String> {
    list.iter().map(|s| (*s).to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hanging_command_is_killed_at_its_timeout_with_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        let commands = Commands {
            timeout: Duration::from_millis(300),
            ..Commands::default()
        };
        let script = format!("sleep 60 & echo $! > {}; wait", pid_file.display());
        let e = commands
            .run("sh", &args(["-c", &script]), None)
            .await
            .unwrap_err();
        assert!(matches!(e, BatchError::Timeout { .. }), "{e}");
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        corral_testkit::eventually_async(
            "the command's child to be killed",
            Duration::from_secs(5),
            || async { corral_runtime::procfs::stat(pid).is_none_or(|s| !s.alive()) },
        )
        .await;
    }

    #[tokio::test]
    async fn commands_get_path_and_their_variables_and_nothing_else_of_the_managers() {
        let commands = Commands {
            env: vec![("SGE_ROOT".into(), "/var/lib/gridengine".into())],
            ..Commands::default()
        };
        // `env` prints exactly what it was given.
        let out = commands.run_ok("slurm", "env", &[], None).await.unwrap();
        let mut names: Vec<&str> = out.lines().filter_map(|l| l.split('=').next()).collect();
        names.sort();
        assert_eq!(names, ["PATH", "SGE_ROOT"], "{out}");
        assert!(
            std::env::var_os("CARGO_MANIFEST_DIR").is_some(),
            "cargo sets it"
        );
    }

    #[tokio::test]
    async fn a_missing_command_and_a_refusal_are_told_apart() {
        let commands = Commands::default();
        let e = commands
            .run("corral-no-such-scheduler-command", &[], None)
            .await
            .unwrap_err();
        assert!(matches!(e, BatchError::CommandMissing { .. }), "{e}");
        let e = commands
            .run_ok(
                "slurm",
                "sh",
                &args(["-c", "echo 'no such partition' >&2; exit 1"]),
                None,
            )
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "slurm refused: no such partition");
        let out = commands
            .run_ok("slurm", "cat", &[], Some("fed\n"))
            .await
            .unwrap();
        assert_eq!(out, "fed\n");
    }
}
