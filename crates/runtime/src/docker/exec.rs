//! Running a command inside a running session of the Docker runtime: a Docker exec instance in
//! the session's container, which has the container's environment, working directory and
//! limits. Its attached stream is taken apart into the [`Execution`]'s pipes by a task (stdout
//! and stderr, or the terminal's one stream), its input fed by another, which shuts the
//! connection's write side once the caller dropped stdin (Docker then closes the command's
//! stdin). Its exit is the exec instance's exit code once its output ended.

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::errors::Error as DockerError;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::query_parameters::ResizeExecOptionsBuilder;
use bollard::Docker;
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::oneshot;

use super::{docker_error, exit_of_code, is_running, server_refusal, DockerRuntime};
use crate::exec::{ExecRequest, Execution, Resizer};
use crate::{Exit, RuntimeError, SessionSpec};

/// An empty command: a login shell, bash where the image has it.
const LOGIN_SHELL: [&str; 3] = [
    "/bin/sh",
    "-c",
    "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi",
];

/// How much of a stream is buffered between Docker's connection and the caller.
const PIPE_BUFFER: usize = 64 * 1024;

/// How long the exit code may take to show once the output ended.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// How often the exec instance is asked whether it still runs, once its output ended.
const EXIT_POLL: Duration = Duration::from_millis(50);

/// How many times the first size is set: Docker refuses it until the command started.
const FIRST_RESIZE_TRIES: u32 = 8;

type Output = std::pin::Pin<Box<dyn Stream<Item = Result<LogOutput, DockerError>> + Send>>;
type Input = std::pin::Pin<Box<dyn AsyncWrite + Send>>;

impl DockerRuntime {
    /// See [`crate::Runtime::exec`]: a Docker exec instance in the session's running
    /// container, with its environment and working directory (`work_root` is not needed).
    pub async fn exec(
        &self,
        spec: &SessionSpec,
        _work_root: &std::path::Path,
        request: &ExecRequest,
    ) -> Result<Execution, RuntimeError> {
        crate::validate_id(&spec.id)?;
        request.validate(&spec.id)?;
        let id = spec.id.as_str();
        let name = Self::container_name(id);
        let not_running = || RuntimeError::NotRunning(id.to_string());
        match self.inspect(&name).await? {
            Some(info) if is_running(&info) => {}
            _ => return Err(not_running()),
        }
        let cmd = if request.command.is_empty() {
            LOGIN_SHELL.iter().map(|s| s.to_string()).collect()
        } else {
            request.command.clone()
        };
        let sized = request.tty && request.cols > 0 && request.rows > 0;
        let config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(request.tty),
            // API 1.42 and later; older daemons get the size by the resize below.
            console_size: sized.then(|| vec![usize::from(request.rows), usize::from(request.cols)]),
            cmd: Some(cmd),
            ..Default::default()
        };
        let exec = match self.docker.create_exec(&name, config).await {
            Ok(created) => created.id,
            Err(e) if matches!(server_refusal(&e), Some(404 | 409)) => return Err(not_running()),
            Err(e) => return Err(docker_error(format!("creating an exec in {name}"), e)),
        };
        let options = StartExecOptions {
            detach: false,
            tty: request.tty,
            output_capacity: None,
        };
        let started = self.docker.start_exec(&exec, Some(options)).await;
        let (output, input) = match started {
            Ok(StartExecResults::Attached { output, input }) => (output, input),
            Ok(StartExecResults::Detached) => {
                return Err(RuntimeError::io(
                    format!("starting an exec in {name}"),
                    std::io::Error::other("the daemon did not attach it"),
                ))
            }
            Err(e) if matches!(server_refusal(&e), Some(404 | 409)) => return Err(not_running()),
            Err(e) => return Err(docker_error(format!("starting an exec in {name}"), e)),
        };
        tracing::info!(session = id, exec = %exec, tty = request.tty, "command started in the session");
        if sized {
            first_resize(&self.docker, &exec, request.cols, request.rows).await;
        }
        Ok(attach(
            self.docker.clone(),
            exec,
            output,
            input,
            request.tty,
        ))
    }
}

/// Resizes the terminal of the exec instance `exec` (nothing if a dimension is 0).
pub(crate) async fn resize_exec(
    docker: &Docker,
    exec: &str,
    cols: u16,
    rows: u16,
) -> Result<(), RuntimeError> {
    if cols == 0 || rows == 0 {
        return Ok(());
    }
    let options = ResizeExecOptionsBuilder::new()
        .w(i32::from(cols))
        .h(i32::from(rows))
        .build();
    docker
        .resize_exec(exec, options)
        .await
        .map_err(|e| docker_error(format!("resizing the terminal of exec {exec}"), e))
}

/// Sets the first size of a terminal just started, trying again while Docker refuses because
/// the command has not started yet (as `docker exec` does).
async fn first_resize(docker: &Docker, exec: &str, cols: u16, rows: u16) {
    for attempt in 1..=FIRST_RESIZE_TRIES {
        match resize_exec(docker, exec, cols, rows).await {
            Ok(()) => return,
            Err(e) if attempt == FIRST_RESIZE_TRIES => {
                tracing::warn!(exec, error = %e, "could not set the terminal's first size")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10 * u64::from(attempt))).await,
        }
    }
}

/// The caller's side of an exec instance: pipes fed from and into its connection.
fn attach(docker: Docker, exec: String, output: Output, input: Input, tty: bool) -> Execution {
    let (stdin, stdin_far) = tokio::io::duplex(PIPE_BUFFER);
    tokio::spawn(feed_input(stdin_far, input));
    let (stdout, stdout_near) = tokio::io::duplex(PIPE_BUFFER);
    let (stderr, stderr_near) = if tty {
        (None, None)
    } else {
        let (far, near) = tokio::io::duplex(PIPE_BUFFER);
        (Some(far), Some(near))
    };
    let (ended, output_ended) = oneshot::channel();
    tokio::spawn(take_apart(output, stdout_near, stderr_near, ended));
    let resizer = if tty {
        Resizer::docker(docker.clone(), exec.clone())
    } else {
        Resizer::none()
    };
    Execution {
        stdin: Box::pin(stdin),
        stdout: Box::pin(stdout),
        stderr: stderr.map(|s| Box::pin(s) as _),
        resizer,
        exit: Box::pin(exit_of_exec(docker, exec, output_ended)),
    }
}

/// Copies what the caller writes into the connection; once the caller dropped its end,
/// shuts the connection's write side, which ends the command's input.
async fn feed_input(mut from: DuplexStream, mut input: Input) {
    if let Err(e) = tokio::io::copy(&mut from, &mut input).await {
        tracing::debug!(error = %e, "an exec's input ended early");
    }
    let _ = input.shutdown().await;
}

/// Writes the connection's frames into the stdout and stderr pipes (a terminal's stream all
/// into stdout), dropping a pipe whose reader went away, then ends both and says so.
async fn take_apart(
    mut output: Output,
    stdout: DuplexStream,
    stderr: Option<DuplexStream>,
    ended: oneshot::Sender<()>,
) {
    let (mut stdout, mut stderr) = (Some(stdout), stderr);
    while let Some(frame) = output.next().await {
        let (pipe, message) = match frame {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                (&mut stdout, message)
            }
            Ok(LogOutput::StdErr { message }) if stderr.is_some() => (&mut stderr, message),
            Ok(LogOutput::StdErr { message }) => (&mut stdout, message),
            Ok(LogOutput::StdIn { .. }) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "an exec's output broke off");
                break;
            }
        };
        if let Some(writer) = pipe {
            if writer.write_all(&message).await.is_err() {
                // Nobody reads it any more: the rest of it is dropped.
                *pipe = None;
            }
        }
    }
    drop((stdout, stderr));
    let _ = ended.send(());
}

/// The exit of exec instance `exec`, once its output ended.
async fn exit_of_exec(docker: Docker, exec: String, output_ended: oneshot::Receiver<()>) -> Exit {
    let _ = output_ended.await;
    let deadline = tokio::time::Instant::now() + EXIT_WAIT;
    loop {
        match docker.inspect_exec(&exec).await {
            Ok(info) if info.running != Some(true) => {
                return match info.exit_code {
                    Some(code) => exit_of_code(code),
                    None => Exit::Failed("the daemon reported no exit code".into()),
                }
            }
            Ok(_) if tokio::time::Instant::now() < deadline => tokio::time::sleep(EXIT_POLL).await,
            Ok(_) => return Exit::Failed("its output ended but it still runs".into()),
            Err(e) => return Exit::Failed(format!("inspecting exec {exec}: {e}")),
        }
    }
}

impl DockerRuntime {
    /// Where the session's ports are reached from the agent: the container's address on its
    /// network (the default bridge), or the loopback for a container on the host's network.
    pub async fn address(&self, id: &str) -> Result<std::net::IpAddr, RuntimeError> {
        let name = Self::container_name(id);
        let info = self
            .inspect(&name)
            .await?
            .filter(is_running)
            .ok_or_else(|| RuntimeError::NotRunning(id.to_string()))?;
        let networks = info
            .network_settings
            .and_then(|s| s.networks)
            .unwrap_or_default();
        if networks.contains_key("host") {
            return Ok(std::net::Ipv4Addr::LOCALHOST.into());
        }
        networks
            .values()
            .filter_map(|n| n.ip_address.as_deref())
            .find_map(|ip| ip.parse().ok())
            .ok_or_else(|| RuntimeError::Unsupported {
                id: id.to_string(),
                what: "reaching a port of a container without a network address".into(),
            })
    }
}
