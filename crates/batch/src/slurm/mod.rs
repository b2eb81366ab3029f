//! Slurm through its command-line tools: `sbatch` reads the rendered script on its standard
//! input; `squeue --json` lists every job slurmctld knows in one call (finished ones too, for
//! `MinJobAge`); `sacct` reads the jobs it has forgotten (from slurmdbd, or with
//! `--completion` from a `jobcomp/filetxt` log, whichever the cluster keeps); `scancel`,
//! `scontrol hold|release|update`; `sinfo --json` for nodes; `scontrol show config|partition`
//! for the configuration.

mod parse;
mod script;

use async_trait::async_trait;

use crate::system::{check_job_id, check_name};
use crate::{
    args, check_signal, BatchError, BatchSystem, Commands, ConfigChange, Job, JobFilter, JobSpec,
    Node, QueueState, Rendered, SchedulerConfig,
};

pub use script::walltime;

const NAME: &str = "slurm";

/// Where Slurm keeps finished jobs once slurmctld forgot them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accounting {
    /// `sacct` (slurmdbd).
    Database,
    /// `sacct --completion` (`JobCompType=jobcomp/filetxt`).
    Completion,
    /// Nowhere: a forgotten job is unknown.
    None,
}

pub struct Slurm {
    commands: Commands,
    accounting: Accounting,
    /// `EnforcePartLimits` is on: sbatch refuses a job beyond its partitions' limits too.
    enforces_limits: bool,
}

impl Slurm {
    pub fn new(commands: Commands, accounting: Accounting) -> Slurm {
        Slurm {
            commands,
            accounting,
            enforces_limits: false,
        }
    }

    /// Asks slurmctld where finished jobs are kept (`AccountingStorageType`, `JobCompType`).
    pub async fn connect(commands: Commands) -> Result<Slurm, BatchError> {
        let text = commands
            .run_ok(NAME, "scontrol", &args(["show", "config"]), None)
            .await?;
        let settings = parse::config(&text);
        let has = |key: &str, value: &str| settings.get(key).is_some_and(|v| v.contains(value));
        let accounting = if has("AccountingStorageType", "slurmdbd") {
            Accounting::Database
        } else if has("JobCompType", "filetxt") {
            Accounting::Completion
        } else {
            Accounting::None
        };
        let enforces_limits = settings
            .get("EnforcePartLimits")
            .is_some_and(|v| matches!(v.trim(), "ALL" | "ANY" | "YES"));
        Ok(Slurm {
            enforces_limits,
            ..Slurm::new(commands, accounting)
        })
    }

    async fn scontrol(&self, words: Vec<String>) -> Result<(), BatchError> {
        let answer = self.commands.run("scontrol", &words, None).await?;
        check(answer, words.get(1).map_or("", String::as_str))
    }

    /// Jobs from the accounting (none if the cluster keeps none): what [`BatchSystem::job`]
    /// reads once slurmctld has forgotten a job.
    pub async fn from_accounting(&self, id: &str) -> Result<Vec<Job>, BatchError> {
        check_job_id(id)?;
        let mut words = args(["--parsable2", "--noheader", "--allusers"]);
        match self.accounting {
            Accounting::None => return Ok(Vec::new()),
            Accounting::Completion => words.push("--completion".into()),
            Accounting::Database => {}
        }
        words.push(format!("--jobs={id}"));
        words.push(format!("--format={}", parse::SACCT_FIELDS));
        let text = self.commands.run_ok(NAME, "sacct", &words, None).await?;
        parse::sacct(&text)
    }
}

/// A failed command: an unknown job, or the scheduler's refusal in its words. `scancel` exits 0
/// after an error it only prints ("Kill job error on job id 9: Invalid job id specified"), and
/// prints it only when verbose (or to a terminal).
fn check(answer: crate::Answer, id: &str) -> Result<(), BatchError> {
    if answer.ok() && !answer.stderr.contains("error:") {
        return Ok(());
    }
    Err(answer.refusal(NAME, id, &["Invalid job id"]))
}

#[async_trait]
impl BatchSystem for Slurm {
    fn name(&self) -> &'static str {
        NAME
    }

    fn refuses_impossible(&self) -> bool {
        self.enforces_limits
    }

    fn render(&self, spec: &JobSpec) -> Result<Rendered, BatchError> {
        spec.check()?;
        Ok(Rendered {
            script: script::script(spec),
            command: args(["sbatch", "--parsable"]),
        })
    }

    async fn submit(&self, spec: &JobSpec) -> Result<String, BatchError> {
        let rendered = self.render(spec)?;
        let out = self
            .commands
            .run_ok(
                NAME,
                "sbatch",
                &rendered.command[1..],
                Some(&rendered.script),
            )
            .await?;
        // `123`, or `123;cluster` on a federation.
        let id = out.trim().split(';').next().unwrap_or_default();
        if crate::is_job_id(id) {
            Ok(id.to_string())
        } else {
            Err(BatchError::parse("sbatch --parsable", "no job id", &out))
        }
    }

    async fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, BatchError> {
        // `--json` lists every job whatever the other options say; the filter applies here.
        let text = self
            .commands
            .run_ok(NAME, "squeue", &args(["--json"]), None)
            .await?;
        let mut jobs = parse::jobs(&text)?;
        jobs.retain(|j| filter.matches(j));
        Ok(jobs)
    }

    async fn job(&self, id: &str) -> Result<Job, BatchError> {
        check_job_id(id)?;
        let known = self.jobs(&JobFilter::default()).await?;
        if let Some(job) = known.iter().find(|j| j.id == id) {
            return Ok(job.clone());
        }
        // A task still waiting is listed with its array's other waiting tasks (`4_[3-4%2]`).
        if let Some(task) = known.iter().find_map(|j| j.waiting_task(id, '_')) {
            return Ok(task);
        }
        self.from_accounting(id)
            .await?
            .into_iter()
            .find(|j| j.id == id)
            .ok_or_else(|| BatchError::NoSuchJob { id: id.into() })
    }

    async fn cancel(&self, id: &str) -> Result<(), BatchError> {
        check_job_id(id)?;
        // `--verbose`: without a terminal, scancel prints its errors only when verbose.
        let words = vec!["--verbose".into(), id.to_string()];
        let answer = self.commands.run("scancel", &words, None).await?;
        check(answer, id)
    }

    async fn hold(&self, id: &str) -> Result<(), BatchError> {
        check_job_id(id)?;
        self.scontrol(vec!["hold".into(), id.into()]).await
    }

    async fn release(&self, id: &str) -> Result<(), BatchError> {
        check_job_id(id)?;
        self.scontrol(vec!["release".into(), id.into()]).await
    }

    async fn signal(&self, id: &str, signal: &str) -> Result<(), BatchError> {
        check_job_id(id)?;
        let signal = check_signal(signal)?;
        // `--full`: the batch shell too, not only the job's steps.
        let words = vec![
            "--verbose".into(),
            format!("--signal={signal}"),
            "--full".into(),
            id.into(),
        ];
        let answer = self.commands.run("scancel", &words, None).await?;
        check(answer, id)
    }

    async fn nodes(&self) -> Result<Vec<Node>, BatchError> {
        let text = self
            .commands
            .run_ok(NAME, "sinfo", &args(["--json"]), None)
            .await?;
        parse::nodes(&text)
    }

    async fn config(&self) -> Result<SchedulerConfig, BatchError> {
        let text = self
            .commands
            .run_ok(NAME, "scontrol", &args(["show", "config"]), None)
            .await?;
        let settings = parse::config(&text);
        let text = self
            .commands
            .run_ok(
                NAME,
                "scontrol",
                &args(["show", "partition", "--oneliner"]),
                None,
            )
            .await?;
        Ok(SchedulerConfig {
            scheduler: NAME.into(),
            version: settings.get("SLURM_VERSION").cloned(),
            queues: parse::partitions(&text)?,
            settings,
        })
    }

    async fn apply(&self, change: &ConfigChange) -> Result<(), BatchError> {
        let words = match change {
            ConfigChange::DrainNode { node, reason } => {
                check_name("node", node, "[],")?;
                if reason.trim().is_empty() || reason.contains('\n') {
                    return Err(BatchError::invalid("reason", "give one line saying why"));
                }
                vec![
                    "update".into(),
                    format!("NodeName={node}"),
                    "State=DRAIN".into(),
                    format!("Reason={reason}"),
                ]
            }
            ConfigChange::ResumeNode { node } => {
                check_name("node", node, "[],")?;
                vec![
                    "update".into(),
                    format!("NodeName={node}"),
                    "State=RESUME".into(),
                ]
            }
            ConfigChange::QueueState { queue, state } => {
                check_name("queue", queue, "[],")?;
                let state = match state {
                    QueueState::Up => "UP",
                    QueueState::Down => "DOWN",
                    QueueState::Drain => "DRAIN",
                };
                vec![
                    "update".into(),
                    format!("PartitionName={queue}"),
                    format!("State={state}"),
                ]
            }
        };
        // An operator's change: as the manager's own account, not the jobs'.
        let answer = self.commands.own().run("scontrol", &words, None).await?;
        check(answer, "update")
    }
}
