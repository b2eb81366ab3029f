//! `corral batch`: a group's batch system (Slurm, Grid Engine...): bind it, and its jobs, nodes
//! and configuration through the manager.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use corral_api::batch::{
    BatchConfig, BatchJob, BatchOptions, ConfigChange, JobSpec, Node, QueueState, Rendered,
    SchedulerConfig, SignalBody, SubmittedJob, SystemName,
};
use serde_json::json;

use super::http::{json as body_of, parse, Api};
use super::render::{self, command_line, fields, or_dash, table};
use super::{api_name, key_value, Out};

/// Which group's batch system.
#[derive(Args)]
pub struct Group {
    /// The scaling group [default: `group` in the config file's context, else dev].
    #[arg(long, short)]
    group: Option<String>,
}

impl Group {
    fn name(self, api: &Api) -> String {
        api.group_or_default(self.group)
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum System {
    Slurm,
    Gridengine,
    Pbs,
    Lsf,
    /// A site's own plugin (`--command`; docs/plugins.md).
    Exec,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Flavor {
    /// PBS Professional and OpenPBS.
    Pbspro,
    Torque,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum State {
    Queued,
    Held,
    Running,
    Suspended,
    Completing,
    Done,
    Failed,
    Cancelled,
    Timeout,
    Unknown,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum QueueTo {
    Up,
    Down,
    Drain,
}

#[derive(Subcommand)]
pub enum Command {
    /// Bind the group to a batch system, run by the manager's Unix user (admin).
    Bind(BindArgs),
    /// Unbind the group from its batch system; its jobs stay in the scheduler (admin).
    Unbind {
        #[command(flatten)]
        group: Group,
        #[command(flatten)]
        out: Out,
    },
    /// The batch system the group is bound to.
    System {
        #[command(flatten)]
        group: Group,
        #[command(flatten)]
        out: Out,
    },
    /// Jobs: an admin's, all; a user's, those Corral submitted for them.
    Jobs {
        #[command(flatten)]
        group: Group,
        /// Only jobs run by this Unix user.
        #[arg(long)]
        user: Option<String>,
        /// Only jobs in this state.
        #[arg(long, value_enum)]
        state: Option<State>,
        /// Only jobs of this name.
        #[arg(long)]
        name: Option<String>,
        /// Only jobs Corral submitted for this Corral user (admin).
        #[arg(long)]
        owner: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// One job, also after the scheduler forgot it.
    Job {
        #[command(flatten)]
        group: Group,
        /// The scheduler's job id.
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Submit a job described in a file (JSON or TOML, docs/batch.md), or a command.
    Submit(SubmitArgs),
    /// Download the outputs of a job that has ended into a directory.
    Outputs {
        #[command(flatten)]
        group: Group,
        id: String,
        /// Where to put them.
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
        #[command(flatten)]
        out: Out,
    },
    /// Cancel a job.
    Cancel {
        #[command(flatten)]
        group: Group,
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Hold a waiting job.
    Hold {
        #[command(flatten)]
        group: Group,
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Release a held job.
    Release {
        #[command(flatten)]
        group: Group,
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Send a signal to a running job's processes.
    Signal {
        #[command(flatten)]
        group: Group,
        id: String,
        /// TERM, USR1, KILL... (with or without SIG).
        signal: String,
        #[command(flatten)]
        out: Out,
    },
    /// The cluster's nodes.
    Nodes {
        #[command(flatten)]
        group: Group,
        #[command(flatten)]
        out: Out,
    },
    /// The scheduler's configuration; with a flag, change it first (admin).
    Config {
        #[command(flatten)]
        group: Group,
        /// Take no new jobs on NODE; running ones finish.
        #[arg(long, value_name = "NODE", conflicts_with_all = ["resume", "queue"])]
        drain: Option<String>,
        /// Why the node is drained.
        #[arg(long, requires = "drain", default_value = "drained with corral")]
        reason: String,
        /// Take jobs on NODE again.
        #[arg(long, value_name = "NODE", conflicts_with = "queue")]
        resume: Option<String>,
        /// Open or close QUEUE (with --state).
        #[arg(long, value_name = "QUEUE", requires = "state")]
        queue: Option<String>,
        /// The queue's new state.
        #[arg(long, value_enum, requires = "queue")]
        state: Option<QueueTo>,
        #[command(flatten)]
        out: Out,
    },
}

/// `batch bind`'s flags: the system and how the manager runs its commands.
#[derive(Args)]
pub struct BindArgs {
    #[command(flatten)]
    group: Group,
    /// The batch system.
    #[arg(value_enum)]
    system: System,
    /// The directory of the scheduler's commands [default: the manager's PATH].
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<String>,
    /// The longest one scheduler command may take [default: 30].
    #[arg(long, value_name = "SECS")]
    timeout_secs: Option<u64>,
    /// A variable for the scheduler's commands (SGE_ROOT=/var/lib/gridengine); repeatable.
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value)]
    env: Vec<(String, String)>,
    /// Grid Engine: the parallel environment of jobs of more than one slot.
    #[arg(long, value_name = "PE")]
    parallel_environment: Option<String>,
    /// Where jobs with --input or --output get their directories (WORK_DIR/USER/RANDOM), on a
    /// file system this host and the nodes share.
    #[arg(long, value_name = "DIR")]
    work_dir: Option<String>,
    /// exec: the plugin program, absolute.
    #[arg(long, value_name = "PROGRAM")]
    command: Option<String>,
    /// The Unix account the scheduler's commands (and so the jobs) run as; required unless
    /// --run-as-manager.
    #[arg(long, value_name = "ACCOUNT")]
    run_as: Option<String>,
    /// Run the jobs as the manager's own account: they can read what it can (its database,
    /// its admin token). Refused when the manager runs as root.
    #[arg(long, conflicts_with = "run_as")]
    run_as_manager: bool,
    /// PBS: which one [default: pbspro].
    #[arg(long, value_enum)]
    flavor: Option<Flavor>,
    /// Run the group's sessions as jobs of this system, each in WORK_DIR/USER/SESSION
    /// (needs --work-dir).
    #[arg(long)]
    sessions: bool,
    #[command(flatten)]
    out: Out,
}

/// `batch submit`'s flags: the job, from a file or a command, and what overrides the file.
#[derive(Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    group: Group,
    /// The job description (`-` reads standard input, as JSON).
    #[arg(long, short, value_name = "FILE", conflicts_with = "command")]
    file: Option<PathBuf>,
    /// The job's name.
    #[arg(long)]
    name: Option<String>,
    /// The working directory, absolute.
    #[arg(long, value_name = "DIR")]
    directory: Option<String>,
    /// The longest it may run: seconds, HH:MM:SS, or 90m, 2h, 1d.
    #[arg(long)]
    walltime: Option<String>,
    /// The queue (Slurm: partition).
    #[arg(long)]
    queue: Option<String>,
    /// Submit held; it waits until released.
    #[arg(long)]
    hold: bool,
    /// A local file uploaded into the job's directory (under its own name) before it starts;
    /// repeatable. Needs the binding's work_dir.
    #[arg(long = "input", value_name = "FILE")]
    inputs: Vec<String>,
    /// A path in the job's directory collected when it ends (`corral batch outputs`);
    /// repeatable.
    #[arg(long = "output", value_name = "PATH")]
    outputs: Vec<String>,
    /// Print the script and command line that would run, and submit nothing.
    #[arg(long)]
    dry_run: bool,
    /// How to print: the job's id, or the manager's JSON answer (here `--output` is a job's
    /// output path, so the long form is --format).
    #[arg(long = "format", short = 'o', value_enum, default_value_t)]
    format: crate::Output,
    /// The program and its arguments (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Runs one `corral batch` subcommand.
pub async fn run(api: &Api, command: Command) -> Result<()> {
    match command {
        Command::Bind(args) => bind(api, args).await,
        Command::Unbind { group, out } => unbind(api, group, out).await,
        Command::System { group, out } => system(api, group, out).await,
        Command::Jobs {
            group,
            user,
            state,
            name,
            owner,
            out,
        } => {
            let query = [
                ("user", user),
                ("state", state.map(|s| api_name(&s))),
                ("name", name),
                ("owner", owner),
            ];
            jobs(api, group, &query, out).await
        }
        Command::Job { group, id, out } => job(api, group, &id, out).await,
        Command::Submit(args) => submit(api, args).await,
        Command::Outputs {
            group,
            id,
            dir,
            out,
        } => {
            let group = group.name(api);
            let job = ["groups", &group, "batch", "jobs", &id];
            let json = matches!(out.output, crate::Output::Json);
            super::run::outputs(api, &job, &dir, json).await
        }
        Command::Cancel { group, id, out } => cancel(api, group, &id, out).await,
        Command::Hold { group, id, out } => act(api, group, &id, "hold", "held", out).await,
        Command::Release { group, id, out } => {
            act(api, group, &id, "release", "released", out).await
        }
        Command::Signal {
            group,
            id,
            signal,
            out,
        } => send_signal(api, group, &id, signal, out).await,
        Command::Nodes { group, out } => nodes(api, group, out).await,
        Command::Config {
            group,
            drain,
            reason,
            resume,
            queue,
            state,
            out,
        } => {
            let group = group.name(api);
            let change = config_change(drain, reason, resume, queue, state);
            config(api, &group, change, out).await
        }
    }
}

/// `batch bind`: the binding sent (with a warning first when the jobs would run as the
/// manager's own account), then one line naming the system.
async fn bind(api: &Api, args: BindArgs) -> Result<()> {
    let BindArgs {
        group,
        system,
        bin_dir,
        timeout_secs,
        env,
        parallel_environment,
        work_dir,
        command,
        run_as,
        run_as_manager,
        flavor,
        sessions,
        out,
    } = args;
    if run_as_manager {
        eprintln!(
            "warning: group jobs will run as the manager's own account and can read \
             what it can (its database, its admin token); give --run-as ACCOUNT to run \
             them as an account of their own"
        );
    }
    let config = BatchConfig {
        system: super::api_value::<SystemName>(&system)?,
        options: BatchOptions {
            bin_dir,
            timeout_secs,
            env: env.into_iter().collect(),
            parallel_environment,
            work_dir,
            command,
            run_as,
            run_as_manager,
            flavor: flavor.map(|f| super::api_value(&f)).transpose()?,
            sessions,
        },
    };
    let group = group.name(api);
    let reply = api
        .put(&["groups", &group, "batch"], &body_of(&config)?)
        .await?;
    if !render::json(out.output, &reply) {
        let config: BatchConfig = parse(&reply)?;
        println!("group {group} bound to {}", config.system.as_str());
    }
    Ok(())
}

/// `batch unbind`: the binding deleted; the scheduler's jobs stay.
async fn unbind(api: &Api, group: Group, out: Out) -> Result<()> {
    let group = group.name(api);
    let reply = api.delete(&["groups", &group, "batch"]).await?;
    if !render::json_or(out.output, &reply, || json!({"unbound": group})) {
        println!("group {group} bound to no batch system");
    }
    Ok(())
}

/// `batch system`: the binding, one `key value` line per option.
async fn system(api: &Api, group: Group, out: Out) -> Result<()> {
    let group = group.name(api);
    let reply = api.get(&["groups", &group, "batch"], &[]).await?;
    if !render::json(out.output, &reply) {
        let c: BatchConfig = parse(&reply)?;
        let o = &c.options;
        fields(&[
            ("system", c.system.as_str().to_string()),
            ("bin_dir", or_dash(o.bin_dir.as_deref())),
            (
                "timeout_secs",
                o.timeout_secs
                    .unwrap_or(corral_batch::DEFAULT_TIMEOUT_SECS)
                    .to_string(),
            ),
            ("env", render::pairs(&o.env)),
            (
                "parallel_environment",
                or_dash(o.parallel_environment.as_deref()),
            ),
            ("work_dir", or_dash(o.work_dir.as_deref())),
            ("command", or_dash(o.command.as_deref())),
            (
                "run_as",
                match (&o.run_as, o.run_as_manager) {
                    (Some(account), _) => account.clone(),
                    (None, true) => "(the manager's own account)".into(),
                    (None, false) => "-".into(),
                },
            ),
            ("flavor", o.flavor.map_or("-".into(), |f| render::word(&f))),
            ("sessions", o.sessions.to_string()),
        ]);
    }
    Ok(())
}

/// `batch jobs`: those the filters in `query` select, as a table.
async fn jobs(api: &Api, group: Group, query: &[(&str, Option<String>)], out: Out) -> Result<()> {
    let group = group.name(api);
    let reply = api.get(&["groups", &group, "batch", "jobs"], query).await?;
    if !render::json(out.output, &reply) {
        let jobs: Vec<BatchJob> = parse(&reply)?;
        let rows: Vec<Vec<String>> = jobs.iter().map(job_row).collect();
        table(
            "jobs",
            &[
                "ID", "NAME", "USER", "OWNER", "STATE", "NATIVE", "EXIT", "QUEUE", "NODES",
                "REASON",
            ],
            &rows,
        );
    }
    Ok(())
}

/// `batch job`: one job's fields, times in RFC 3339.
async fn job(api: &Api, group: Group, id: &str, out: Out) -> Result<()> {
    let group = group.name(api);
    let reply = api
        .get(&["groups", &group, "batch", "jobs", id], &[])
        .await?;
    if !render::json(out.output, &reply) {
        let BatchJob {
            job,
            owner,
            missing_outputs,
        } = parse(&reply)?;
        let time = |t: Option<i64>| t.map_or("-".into(), |s| render::time(s * 1000));
        fields(&[
            ("id", job.id.clone()),
            ("name", job.name.clone()),
            ("user", job.user.clone()),
            ("owner", or_dash(owner.as_deref())),
            ("state", job.state.as_str().to_string()),
            ("native_state", job.native_state.clone()),
            ("reason", or_dash(job.reason.as_deref())),
            (
                "exit_code",
                job.exit_code.map_or("-".into(), |c| c.to_string()),
            ),
            ("queue", or_dash(job.queue.as_deref())),
            ("nodes", or_dash(job.nodes.as_deref())),
            ("submitted_at", time(job.submitted_at)),
            ("started_at", time(job.started_at)),
            ("ended_at", time(job.ended_at)),
            ("array_id", or_dash(job.array_id.as_deref())),
            ("tasks", or_dash(job.tasks.as_deref())),
            (
                "missing_outputs",
                missing_outputs.map_or("-".into(), |m| m.join(", ")),
            ),
        ]);
    }
    Ok(())
}

/// `batch submit`: the job (or with --dry-run, what would run) sent, then its inputs.
async fn submit(api: &Api, args: SubmitArgs) -> Result<()> {
    let spec = job_spec(&args)?;
    let group = args.group.name(api);
    let query = [("dry_run", args.dry_run.then(|| "true".to_string()))];
    let path = ["groups", &group, "batch", "jobs"];
    let body = body_of(&spec)?;
    let reply = api
        .call(reqwest::Method::POST, &path, &query, Some(&body))
        .await?;
    if !render::json(args.format, &reply) {
        if args.dry_run {
            let r: Rendered = parse(&reply)?;
            println!("# {}", command_line(&r.command));
            print!("{}", r.script);
        } else {
            let s: SubmittedJob = parse(&reply)?;
            println!("submitted job {}", s.id);
        }
    }
    if !args.dry_run && !args.inputs.is_empty() {
        let s: SubmittedJob = parse(&reply)?;
        let job = ["groups", &group, "batch", "jobs", &s.id];
        super::session::upload_inputs(api, &job, &args.inputs).await?;
    }
    Ok(())
}

/// The job `batch submit` sends: the file's, or the command's, with the flags given winning
/// over the file; checked before anything is sent.
fn job_spec(args: &SubmitArgs) -> Result<JobSpec> {
    let mut spec = match (&args.file, args.command.split_first()) {
        (Some(path), _) => read_spec(path)?,
        (None, Some((program, arguments))) => JobSpec {
            executable: Some(program.clone()),
            arguments: arguments.to_vec(),
            ..JobSpec::default()
        },
        (None, None) => bail!("give a job description (--file FILE) or a command after --"),
    };
    // Flags given win over the file.
    spec.name = args.name.clone().or(spec.name);
    spec.directory = args.directory.clone().or(spec.directory);
    spec.queue = args.queue.clone().or(spec.queue);
    spec.hold |= args.hold;
    spec.inputs
        .extend(super::session::input_names(&args.inputs)?);
    spec.outputs.extend(args.outputs.iter().cloned());
    if let Some(text) = &args.walltime {
        spec.walltime = Some(
            corral_batch::parse_walltime(text).map_err(|e| anyhow::anyhow!("--walltime: {e}"))?,
        );
    }
    spec.check().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(spec)
}

/// `batch cancel`: the job deleted, then one line.
async fn cancel(api: &Api, group: Group, id: &str, out: Out) -> Result<()> {
    let group = group.name(api);
    let reply = api.delete(&["groups", &group, "batch", "jobs", id]).await?;
    if !render::json(out.output, &reply) {
        println!("cancelled job {id}");
    }
    Ok(())
}

/// `batch signal`: the signal sent to the job, then one line.
async fn send_signal(api: &Api, group: Group, id: &str, signal: String, out: Out) -> Result<()> {
    let group = group.name(api);
    let body = body_of(&SignalBody {
        signal: signal.clone(),
    })?;
    let reply = api
        .post(
            &["groups", &group, "batch", "jobs", id, "signal"],
            Some(&body),
        )
        .await?;
    if !render::json(out.output, &reply) {
        println!("sent {signal} to job {id}");
    }
    Ok(())
}

/// `batch nodes`: the cluster's nodes as a table, memory in GiB.
async fn nodes(api: &Api, group: Group, out: Out) -> Result<()> {
    let group = group.name(api);
    let reply = api.get(&["groups", &group, "batch", "nodes"], &[]).await?;
    if !render::json(out.output, &reply) {
        let nodes: Vec<Node> = parse(&reply)?;
        let gib = |b: u64| format!("{:.1}GiB", b as f64 / (1u64 << 30) as f64);
        let rows: Vec<Vec<String>> = nodes
            .iter()
            .map(|n| {
                vec![
                    n.name.clone(),
                    render::word(&n.state),
                    n.native_state.clone(),
                    format!("{}/{}", n.cpus_allocated, n.cpus),
                    format!("{}/{}", gib(n.memory_allocated), gib(n.memory)),
                    n.gpus.to_string(),
                    n.queues.join(","),
                    or_dash(n.reason.as_deref()),
                ]
            })
            .collect();
        table(
            "nodes",
            &[
                "NAME", "STATE", "NATIVE", "CPUS", "MEMORY", "GPUS", "QUEUES", "REASON",
            ],
            &rows,
        );
    }
    Ok(())
}

/// The change `batch config`'s flags ask for, if any (clap lets at most one through).
fn config_change(
    drain: Option<String>,
    reason: String,
    resume: Option<String>,
    queue: Option<String>,
    state: Option<QueueTo>,
) -> Option<ConfigChange> {
    match (drain, resume, queue, state) {
        (Some(node), _, _, _) => Some(ConfigChange::DrainNode { node, reason }),
        (_, Some(node), _, _) => Some(ConfigChange::ResumeNode { node }),
        (_, _, Some(queue), Some(state)) => Some(ConfigChange::QueueState {
            queue,
            state: match state {
                QueueTo::Up => QueueState::Up,
                QueueTo::Down => QueueState::Down,
                QueueTo::Drain => QueueState::Drain,
            },
        }),
        _ => None,
    }
}

/// `batch config`: the change made first if there is one, then the scheduler's settings and
/// its queues.
async fn config(api: &Api, group: &str, change: Option<ConfigChange>, out: Out) -> Result<()> {
    let path = ["groups", group, "batch", "config"];
    let reply = match change {
        Some(change) => {
            let body = body_of(&change)?;
            api.call(reqwest::Method::PATCH, &path, &[], Some(&body))
                .await?
        }
        None => api.get(&path, &[]).await?,
    };
    if !render::json(out.output, &reply) {
        let c: SchedulerConfig = parse(&reply)?;
        let mut rows = vec![
            ("scheduler", c.scheduler.clone()),
            ("version", or_dash(c.version.as_deref())),
        ];
        rows.extend(c.settings.iter().map(|(k, v)| (k.as_str(), v.clone())));
        fields(&rows);
        println!();
        let queues: Vec<Vec<String>> = c
            .queues
            .iter()
            .map(|q| {
                vec![
                    q.name.clone(),
                    q.state.clone(),
                    if q.default { "yes" } else { "" }.into(),
                    q.max_walltime.map_or("-".into(), |s| s.to_string()),
                    q.nodes.clone(),
                ]
            })
            .collect();
        table(
            "queues",
            &["QUEUE", "STATE", "DEFAULT", "MAX WALLTIME (S)", "NODES"],
            &queues,
        );
    }
    Ok(())
}

fn job_row(j: &BatchJob) -> Vec<String> {
    let job = &j.job;
    vec![
        job.id.clone(),
        job.name.clone(),
        job.user.clone(),
        or_dash(j.owner.as_deref()),
        job.state.as_str().to_string(),
        job.native_state.clone(),
        job.exit_code.map_or("-".into(), |c| c.to_string()),
        or_dash(job.queue.as_deref()),
        or_dash(job.nodes.as_deref()),
        or_dash(job.reason.as_deref()),
    ]
}

/// `hold`, `release`: a POST on the job, then one line.
async fn act(api: &Api, group: Group, id: &str, action: &str, done: &str, out: Out) -> Result<()> {
    let group = group.name(api);
    let reply = api
        .post(&["groups", &group, "batch", "jobs", id, action], None)
        .await?;
    if !render::json(out.output, &reply) {
        println!("{done} job {id}");
    }
    Ok(())
}

/// A job description from a file: TOML when it ends in `.toml`, else JSON; errors name the
/// file and the field.
fn read_spec(path: &std::path::Path) -> Result<JobSpec> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    let spec = if path.extension().is_some_and(|e| e == "toml") {
        JobSpec::parse_toml(&text)
    } else {
        JobSpec::parse_json(&text)
    };
    spec.map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}
