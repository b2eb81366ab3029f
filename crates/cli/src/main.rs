//! `corral`: the single binary of Corral.

mod bench;
mod bench_agent;
mod bench_api;
mod bench_apps;
mod bench_batch;
mod bench_ha;
mod bench_interactive;
mod bench_run;
mod bench_scale;
mod bench_sim;
mod bench_ui;
mod client;
mod daemons;
mod server_config;
mod simulate;
mod table;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use corral_core::plan::{plan, Problem};
use corral_manager::serve::Connections;

#[global_allocator]
static ALLOCATOR: corral_alloc::Mimalloc = corral_alloc::Mimalloc;

#[derive(Parser)]
#[command(
    name = "corral",
    version,
    about = "Corral: a cluster resource manager for compute sessions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Default, ValueEnum)]
enum Output {
    /// Tables for people.
    #[default]
    Table,
    /// JSON for scripts.
    Json,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per run: size does not matter
enum Command {
    /// Dry-run one pass of the cycle on a planning problem and print its decisions.
    Plan {
        /// The problem as JSON (see docs/plan-format.md); `-` reads standard input.
        file: PathBuf,
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
    },
    /// Replay a workload trace (SWF or CSV) on a group's configuration, or several side by
    /// side, and report waits, utilisation, node-hours and cost (docs/simulate.md).
    Simulate(simulate::SimulateArgs),
    /// Run the manager: the REST API, the control loop and the store.
    Server(ServerArgs),
    /// Run a benchmark and print one `name value unit` line per case.
    Bench {
        #[command(subcommand)]
        target: bench::Target,
    },
    /// Build the image the docker provider starts agents from, on the Docker host: FROM scratch,
    /// this corral binary with the libraries it links, and a static busybox for sessions' shells
    /// (/bin/busybox from Debian's busybox-static).
    AgentImage {
        /// The image's tag (the docker provider's `image` option).
        #[arg(long, default_value = "corral-agent:latest")]
        tag: String,
        /// The corral binary to put in it [default: this one].
        #[arg(long, value_name = "PATH")]
        binary: Option<PathBuf>,
        /// The Docker daemon [default: DOCKER_HOST, else the local socket].
        #[arg(long, value_name = "URL")]
        docker_host: Option<String>,
    },
    /// The agent's guard, which `corral agent` starts beside itself: it stops the agent's
    /// sessions once the agent has been cut off from the manager past its deadline, also when
    /// the agent itself cannot (docs/high-availability.md).
    #[command(hide = true)]
    AgentGuard(daemons::GuardArgs),
    #[command(flatten)]
    Client(client::Command),
    /// Run a manager on embedded SQLite and a local agent together (one machine, group "dev"),
    /// and write the client configuration, so that `corral session run -- echo hello` works
    /// from another terminal without flags.
    Dev(daemons::DevArgs),
    /// Print a completion script for a shell: `corral completions bash > /etc/bash_completion.d/corral`,
    /// `corral completions zsh > "${fpath[1]}/_corral"`, `corral completions fish > ~/.config/fish/completions/corral.fish`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `corral server`'s flags, each also a `CORRAL_*` variable and a key of `--config`'s file.
#[derive(clap::Args)]
struct ServerArgs {
    /// A TOML file whose keys are these flags' names (`listen`, `data_dir`, ...): each
    /// applies unless the flag or its CORRAL_* variable is given (deploy/server.toml).
    #[arg(long, env = "CORRAL_SERVER_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Holds admin.token and, without --database-url, the SQLite database corral.db.
    #[arg(long, env = "CORRAL_DATA_DIR", default_value = "corral-data")]
    data_dir: PathBuf,
    /// Address the API listens on.
    #[arg(long, env = "CORRAL_LISTEN", default_value = "127.0.0.1:8470")]
    listen: std::net::SocketAddr,
    /// postgres://... (or sqlite://PATH); without it, SQLite in the data directory.
    #[arg(long, env = "CORRAL_DATABASE_URL")]
    database_url: Option<String>,
    /// Seconds between passes of a group when nothing happens.
    #[arg(long, env = "CORRAL_TICK_SECS", default_value_t = 5.0)]
    tick_secs: f64,
    /// Seconds a group's lease lasts unrenewed: with several managers on one PostgreSQL
    /// database, a manager that dies has its groups taken over this long after.
    #[arg(long, env = "CORRAL_LEASE_SECS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    lease_secs: u64,
    /// Seconds between an idle agent's syncs (its heartbeat).
    #[arg(long, env = "CORRAL_HEARTBEAT_SECS", default_value_t = 5)]
    heartbeat_secs: u64,
    /// Seconds of silence after which an agent is lost and its sessions follow the group's
    /// on_agent_lost policy.
    #[arg(long, env = "CORRAL_LOST_AFTER_SECS", default_value_t = 30)]
    lost_after_secs: u64,
    /// Seconds after which terminated agents (with their tokens), ended instances and used
    /// or expired bootstrap tokens are forgotten; 0 keeps them [default: a week].
    #[arg(long, env = "CORRAL_RETENTION_SECS",
          default_value_t = corral_manager::DEFAULT_RETENTION.as_secs())]
    retention_secs: u64,
    /// The URL agents that providers launch use to reach this manager [default:
    /// http://<listen>, with 127.0.0.1 for 0.0.0.0].
    #[arg(long, env = "CORRAL_ADVERTISE_URL", value_name = "URL")]
    advertise_url: Option<String>,
    /// Serve GET /metrics (Prometheus) without a token.
    #[arg(long, env = "CORRAL_METRICS_PUBLIC")]
    metrics_public: bool,
    /// How log lines are written to standard error.
    #[arg(long, env = "CORRAL_LOG_FORMAT", value_enum, default_value_t)]
    log_format: LogFormat,
    /// Serve HTTPS with this certificate (PEM, the server's first, then its chain).
    #[arg(
        long,
        env = "CORRAL_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        env = "CORRAL_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
    /// Seconds a client may take to send a request head (and its TLS handshake).
    #[arg(long, env = "CORRAL_HEADER_TIMEOUT_SECS", value_name = "S",
          default_value_t = Connections::default().header_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_secs: u64,
    /// Seconds a kept-alive connection may stay silent between requests.
    #[arg(long, env = "CORRAL_IDLE_TIMEOUT_SECS", value_name = "S",
          default_value_t = Connections::default().idle_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_secs: u64,
    /// Seconds a request body may stall (or a client leave a response unread); the clock
    /// restarts with every chunk, so slow but steady uploads go on.
    #[arg(long, env = "CORRAL_BODY_TIMEOUT_SECS", value_name = "S",
          default_value_t = Connections::default().body_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    body_timeout_secs: u64,
    /// Connections served at once; more wait to be accepted [default: the open-file limit,
    /// ulimit -n, less a quarter of it (256 to 1024)]. Each agent keeps one open.
    #[arg(long, env = "CORRAL_MAX_CONNECTIONS", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: Option<u64>,
    /// The key file that seals provider secrets in the database [default:
    /// <data dir>/secrets.key, created at first start]. CORRAL_SECRETS_KEY (the key itself,
    /// 32 bytes in base64) can stand in for it; managers sharing a database need one key.
    #[arg(long, env = "CORRAL_SECRETS_KEY_FILE", value_name = "FILE")]
    secrets_key_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    daemons::keep_memory_private();
    daemons::take_resume_token();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Err(e) = server_config::apply::<Cli>(&args) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    // A stamped build says its stamped version (corral_api::agent_builds).
    let matches = Cli::command()
        .version(corral_api::agent_builds::version())
        .get_matches_from(args);
    let json_errors = wants_json(&matches);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // A short-lived command dies quietly when the reader of its output goes away (`corral plan
    // f.json | head`), as command-line tools do, instead of panicking on a failed write. A
    // daemon keeps SIGPIPE ignored (Rust's default): a log reader or a plugin that goes away
    // must not kill it; its writes fail with EPIPE instead, which it survives.
    #[cfg(unix)]
    if !is_daemon(&cli.command) {
        // SAFETY: restoring the default disposition of one signal before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // TLS (the AWS SDK, kube, https:// managers) uses ring, the one provider linked in.
    corral_api::tls::install_crypto_provider();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!, which panics when standard error is closed.
            let _ = if json_errors {
                writeln!(std::io::stderr(), "{}", error_json(&e))
            } else {
                writeln!(std::io::stderr(), "error: {e:#}")
            };
            ExitCode::FAILURE
        }
    }
}

/// Whether the command line asks for JSON (`-o json`, `--output json`, `--format json`): then
/// errors are JSON too.
fn wants_json(matches: &clap::ArgMatches) -> bool {
    let mut level = Some(matches);
    while let Some(m) = level {
        for id in ["output", "format"] {
            if let Ok(Some(mut values)) = m.try_get_raw(id) {
                if values.any(|v| v == "json") {
                    return true;
                }
            }
        }
        level = m.subcommand().map(|(_, sub)| sub);
    }
    false
}

/// An error as JSON on standard error: `{"error": {"message": ...}}`, with the manager's
/// `status`, `code` and `details` when it refused the call.
fn error_json(e: &anyhow::Error) -> serde_json::Value {
    let mut error = serde_json::json!({"message": format!("{e:#}")});
    if let Some(client::CallError {
        error:
            corral_api::ClientError::Refused {
                status,
                code,
                details,
                ..
            },
        ..
    }) = e.downcast_ref::<client::CallError>()
    {
        error["status"] = (*status).into();
        error["code"] = code.clone().into();
        error["details"] = details.clone();
    }
    serde_json::json!({ "error": error })
}

/// The subcommands that run until stopped: `server`, `agent` and `dev`.
fn is_daemon(command: &Command) -> bool {
    matches!(
        command,
        Command::Server(_)
            | Command::Dev(_)
            | Command::AgentGuard(_)
            | Command::Client(client::Command::Agent { command: None, .. })
    )
}

/// Runs the subcommand parsed.
fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Plan { file, output } => plan_file(&file, output),
        Command::Server(args) => serve(args),
        Command::Bench { target } => {
            // The measured managers log only when asked (RUST_LOG): logs cost time.
            if std::env::var_os("RUST_LOG").is_some() {
                init_logs(LogFormat::Text);
            }
            bench::run(target)
        }
        Command::Simulate(args) => simulate::run(args),
        Command::AgentImage {
            tag,
            binary,
            docker_host,
        } => agent_image(&tag, binary, docker_host.as_deref()),
        Command::Client(client::Command::Agent {
            conn,
            command: None,
            daemon,
        }) => daemons::run_agent(*daemon, conn),
        Command::Client(command) => client::run(command),
        Command::Dev(args) => daemons::run_dev(args),
        Command::AgentGuard(args) => daemons::run_guard(args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "corral", &mut std::io::stdout());
            Ok(())
        }
    }
}

/// `corral plan FILE.json`: one pass of the cycle on the problem in the file (`-`: standard
/// input), its decisions printed as `corral group plan` prints them, or as JSON.
fn plan_file(file: &std::path::Path, output: Output) -> Result<()> {
    let text = if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading standard input")?;
        s
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let problem: Problem = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a valid planning problem", file.display()))?;
    let snapshot = problem
        .into_snapshot()
        .with_context(|| format!("{}: not a valid planning problem", file.display()))?;
    let out = plan(&snapshot);
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&out)?),
        Output::Table => client::print_plan(&serde_json::from_value::<corral_api::plan::PlanView>(
            serde_json::to_value(&out)?,
        )?),
    }
    Ok(())
}

/// `corral server`: the flags checked, files made private to the manager's owner, logs
/// started, then the manager served until Ctrl-C or SIGTERM.
fn serve(args: ServerArgs) -> Result<()> {
    if args.lost_after_secs <= args.heartbeat_secs {
        anyhow::bail!(
            "--lost-after-secs ({}) must be longer than --heartbeat-secs ({})",
            args.lost_after_secs,
            args.heartbeat_secs
        );
    }
    let secrets_key = secrets_key(args.secrets_key_file.clone())?;
    // What the manager writes (the database, session logs and outputs, providers'
    // files) is for its owner only, whatever umask it was started with.
    #[cfg(unix)]
    // SAFETY: umask only sets the process's file mode mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
    init_logs(args.log_format);
    let config = manager_config(args, secrets_key)?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let shutdown = async {
            stop_signal().await;
        };
        corral_manager::serve(config, shutdown).await
    })?;
    Ok(())
}

/// Where the secrets key comes from: CORRAL_SECRETS_KEY (not a flag: a key on the command line
/// would show in `ps`), `--secrets-key-file`, or the data directory; never two of them.
fn secrets_key(file: Option<PathBuf>) -> Result<corral_manager::secrets::KeySource> {
    let key = std::env::var("CORRAL_SECRETS_KEY")
        .ok()
        .filter(|k| !k.is_empty());
    Ok(match (key, file) {
        (Some(_), Some(_)) => anyhow::bail!(
            "CORRAL_SECRETS_KEY and --secrets-key-file (CORRAL_SECRETS_KEY_FILE) both \
             give a secrets key: keep one"
        ),
        (Some(key), None) => corral_manager::secrets::KeySource::Value(key),
        (None, Some(file)) => corral_manager::secrets::KeySource::File(file),
        (None, None) => corral_manager::secrets::KeySource::DataDir,
    })
}

/// The manager's configuration from `corral server`'s flags.
fn manager_config(
    args: ServerArgs,
    secrets_key: corral_manager::secrets::KeySource,
) -> Result<corral_manager::Config> {
    let tick = std::time::Duration::try_from_secs_f64(args.tick_secs)
        .context("--tick-secs: not a duration")?;
    Ok(corral_manager::Config {
        data_dir: args.data_dir,
        listen: args.listen,
        database_url: args.database_url,
        tick,
        lease: std::time::Duration::from_secs(args.lease_secs),
        heartbeat: std::time::Duration::from_secs(args.heartbeat_secs.max(1)),
        lost_after: std::time::Duration::from_secs(args.lost_after_secs),
        retention: (args.retention_secs > 0)
            .then(|| std::time::Duration::from_secs(args.retention_secs)),
        advertise_url: args.advertise_url,
        metrics_public: args.metrics_public,
        connections: Connections {
            header_timeout: std::time::Duration::from_secs(args.header_timeout_secs),
            idle_timeout: std::time::Duration::from_secs(args.idle_timeout_secs),
            body_timeout: std::time::Duration::from_secs(args.body_timeout_secs),
            max_connections: args
                .max_connections
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        },
        tls: args
            .tls_cert
            .zip(args.tls_key)
            .map(|(cert, key)| corral_manager::serve::TlsFiles { cert, key }),
        secrets_key,
        ..Default::default()
    })
}

/// `corral agent-image`: the docker provider's agent image built from `binary` (default: this
/// one); its tag printed.
fn agent_image(tag: &str, binary: Option<PathBuf>, docker_host: Option<&str>) -> Result<()> {
    let binary = match binary {
        Some(b) => b,
        None => std::env::current_exe().context("finding this corral binary")?,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let docker = corral_provider::docker::client(docker_host).await?;
        corral_provider::docker::build_agent_image(&docker, tag, &binary).await
    })?;
    println!("{tag}");
    Ok(())
}

/// How a daemon writes its log lines.
#[derive(Clone, Copy, Default, ValueEnum)]
pub(crate) enum LogFormat {
    /// One line per event for people (coloured on a terminal only).
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Logs to standard error, filtered by RUST_LOG (default: info).
pub(crate) fn init_logs(format: LogFormat) {
    use std::io::IsTerminal;
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A line that cannot be written (standard error closed) is dropped; reporting that
        // would take eprintln!, which panics there.
        .log_internal_errors(false);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().init(),
    }
}

/// Ctrl-C or SIGTERM (what service managers and providers stop daemons with).
async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
