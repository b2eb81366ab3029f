//! Grid Engine (Son of Grid Engine, Open Grid Scheduler, Altair Grid Engine's classic tools)
//! through its command-line tools: `qsub -terse -w e` reads the rendered script on its standard
//! input (`-w e`: a request no queue can ever satisfy is refused at submit, instead of waiting
//! in `qw` forever); `qstat -xml` lists the jobs waiting and running, `qstat -s z -xml` those
//! finished that the master remembers, and `qacct` their exit status from the accounting file;
//! `qdel`, `qhold`, `qrls`; `qhost -xml -q` for nodes; `qconf` for the configuration and
//! `qmod -d|-e` to close and open queue instances.

mod parse;
mod script;

use async_trait::async_trait;

use crate::system::{check_job_id, check_name};
use crate::{
    args, BatchError, BatchSystem, Commands, ConfigChange, Job, JobFilter, JobSpec, JobState, Node,
    Queue, QueueState, Rendered, SchedulerConfig,
};

const NAME: &str = "gridengine";

pub struct GridEngine {
    commands: Commands,
    /// The parallel environment for jobs of more than one slot (sites name their own).
    parallel_environment: Option<String>,
}

impl GridEngine {
    pub fn new(commands: Commands, parallel_environment: Option<String>) -> GridEngine {
        GridEngine {
            commands,
            parallel_environment,
        }
    }

    async fn qstat(&self, finished: bool) -> Result<Vec<Job>, BatchError> {
        let mut words = args(["-xml", "-u", "*"]);
        if finished {
            words.extend(args(["-s", "z"]));
        }
        let text = self.commands.run_ok(NAME, "qstat", &words, None).await?;
        parse::qstat(&text)
    }

    /// Accounting records: of one job (`Some(id)`), or of every job started since `since`
    /// (`qacct -b`, `[[CC]YY]MMDDhhmm`).
    async fn qacct(&self, id: Option<&str>, since: Option<i64>) -> Result<Vec<Job>, BatchError> {
        let mut words = vec!["-j".to_string()];
        if let Some(id) = id {
            // `7.2`: job 7's task 2.
            match id.split_once('.') {
                Some((job, task)) => words.extend([job.to_string(), "-t".into(), task.into()]),
                None => words.push(id.to_string()),
            }
        }
        if let Some(since) = since {
            let time = jiff::Timestamp::from_second(since)
                .map_err(|e| BatchError::invalid("since", e.to_string()))?;
            words.push("-b".into());
            words.push(time.strftime("%Y%m%d%H%M").to_string());
        }
        let answer = self.commands.run("qacct", &words, None).await?;
        if answer.ok() {
            return parse::finished(&answer.stdout);
        }
        // "error: job id 7 not found", or an accounting file not written yet.
        let complaint = answer.complaint().to_ascii_lowercase();
        if complaint.contains("not found") || complaint.contains("no such file") {
            return Ok(Vec::new());
        }
        Err(BatchError::Refused {
            scheduler: NAME,
            message: answer.complaint(),
        })
    }

    /// Finished jobs the master remembers, with their end from the accounting.
    async fn finished(&self) -> Result<Vec<Job>, BatchError> {
        let zombies = self.qstat(true).await?;
        let Some(oldest) = zombies.iter().filter_map(|j| j.submitted_at).min() else {
            return Ok(Vec::new());
        };
        let accounted = self.qacct(None, Some(oldest)).await?;
        let mut jobs = Vec::new();
        for zombie in zombies {
            let ended: Vec<&Job> = accounted
                .iter()
                .filter(|j| j.id == zombie.id || j.array_id.as_deref() == Some(&zombie.id))
                .collect();
            if ended.is_empty() {
                jobs.push(unaccounted(zombie));
            } else {
                jobs.extend(ended.into_iter().cloned());
            }
        }
        Ok(jobs)
    }

    async fn act(&self, program: &str, id: &str) -> Result<(), BatchError> {
        check_job_id(id)?;
        let answer = self.commands.run(program, &[id.to_string()], None).await?;
        if answer.ok() {
            return Ok(());
        }
        Err(answer.refusal(NAME, id, &["does not exist"]))
    }

    /// An operator's change: as the manager's own account, not the jobs'.
    async fn qmod(&self, flag: &str, target: String) -> Result<(), BatchError> {
        let answer = self
            .commands
            .own()
            .run("qmod", &[flag.to_string(), target], None)
            .await?;
        // qmod exits 0 after some refusals ("... does not exist"), which it prints.
        let complaint = answer.complaint();
        if answer.ok() && !complaint.contains("does not exist") && !complaint.contains("denied") {
            Ok(())
        } else {
            Err(BatchError::Refused {
                scheduler: NAME,
                message: complaint,
            })
        }
    }
}

/// A job the master says ended but the accounting does not know: its record is not written yet
/// (within `flush_time`), or it was deleted before it ran, which Grid Engine does not record.
fn unaccounted(zombie: Job) -> Job {
    Job {
        state: JobState::Completing,
        reason: Some("ended; not in the accounting (yet, or deleted before it ran)".into()),
        ..zombie
    }
}

#[async_trait]
impl BatchSystem for GridEngine {
    fn name(&self) -> &'static str {
        NAME
    }

    /// `qsub -w e` refuses a job no queue could ever run.
    fn refuses_impossible(&self) -> bool {
        true
    }

    fn render(&self, spec: &JobSpec) -> Result<Rendered, BatchError> {
        spec.check()?;
        Ok(Rendered {
            script: script::script(spec, self.parallel_environment.as_deref())?,
            command: args(["qsub", "-terse", "-w", "e"]),
        })
    }

    async fn submit(&self, spec: &JobSpec) -> Result<String, BatchError> {
        let rendered = self.render(spec)?;
        let out = self
            .commands
            .run_ok(NAME, "qsub", &rendered.command[1..], Some(&rendered.script))
            .await?;
        // `5`, or an array's `7.1-4:1`.
        let id = out.trim().split('.').next().unwrap_or_default();
        if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
            Ok(id.to_string())
        } else {
            Err(BatchError::parse("qsub -terse", "no job id", &out))
        }
    }

    async fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, BatchError> {
        let mut jobs = self.qstat(false).await?;
        jobs.extend(self.finished().await?);
        jobs.retain(|j| filter.matches(j));
        Ok(jobs)
    }

    async fn job(&self, id: &str) -> Result<Job, BatchError> {
        check_job_id(id)?;
        let waiting = self.qstat(false).await?;
        if let Some(job) = waiting.iter().find(|j| j.id == id) {
            return Ok(job.clone());
        }
        // A task still waiting is listed with its array's other waiting tasks (`7`, `3,4`).
        if let Some(task) = waiting.iter().find_map(|j| j.waiting_task(id, '.')) {
            return Ok(task);
        }
        let accounted = self.qacct(Some(id), None).await?;
        if let Some(job) = accounted.into_iter().find(|j| j.id == id) {
            return Ok(job);
        }
        // Remembered as finished but never accounted: deleted before it ran, or ended this
        // second and not yet written to the accounting.
        if let Some(zombie) = self.qstat(true).await?.into_iter().find(|j| j.id == id) {
            return Ok(unaccounted(zombie));
        }
        Err(BatchError::NoSuchJob { id: id.into() })
    }

    async fn cancel(&self, id: &str) -> Result<(), BatchError> {
        self.act("qdel", id).await
    }

    async fn hold(&self, id: &str) -> Result<(), BatchError> {
        self.act("qhold", id).await
    }

    async fn release(&self, id: &str) -> Result<(), BatchError> {
        self.act("qrls", id).await
    }

    async fn signal(&self, id: &str, signal: &str) -> Result<(), BatchError> {
        check_job_id(id)?;
        let signal = crate::check_signal(signal)?;
        // Grid Engine sends no arbitrary signal; it suspends (SIGSTOP) and resumes (SIGCONT).
        let flag = match signal {
            "STOP" => "-sj",
            "CONT" => "-usj",
            _ => {
                return Err(BatchError::Unsupported {
                    scheduler: NAME,
                    what: format!("send SIG{signal} (only STOP and CONT, through qmod)"),
                })
            }
        };
        self.qmod(flag, id.to_string()).await
    }

    async fn nodes(&self) -> Result<Vec<Node>, BatchError> {
        let text = self
            .commands
            .run_ok(NAME, "qhost", &args(["-xml", "-q"]), None)
            .await?;
        parse::hosts(&text)
    }

    async fn config(&self) -> Result<SchedulerConfig, BatchError> {
        let text = self
            .commands
            .run_ok(NAME, "qconf", &args(["-sconf"]), None)
            .await?;
        let settings = parse::settings(&text);
        // `qstat -help` opens with the version: `SGE 8.1.9`.
        let help = self.commands.run("qstat", &args(["-help"]), None).await?;
        let version = help.stdout.lines().next().map(|l| l.trim().to_string());
        let nodes = self.nodes().await?;
        let names = self
            .commands
            .run_ok(NAME, "qconf", &args(["-sql"]), None)
            .await?;
        let mut queues = Vec::new();
        for name in names.lines().map(str::trim).filter(|n| !n.is_empty()) {
            let text = self
                .commands
                .run_ok(NAME, "qconf", &["-sq".into(), name.into()], None)
                .await?;
            let queue = parse::settings(&text);
            let on: Vec<&Node> = nodes
                .iter()
                .filter(|n| n.queues.iter().any(|q| q == name))
                .collect();
            // Closed when every instance on a host is disabled.
            let closed = !on.is_empty()
                && on.iter().all(|n| {
                    matches!(
                        n.state,
                        crate::NodeState::Drained | crate::NodeState::Draining
                    )
                });
            queues.push(Queue {
                name: name.to_string(),
                state: if closed { "down" } else { "up" }.into(),
                default: false,
                max_walltime: queue
                    .get("h_rt")
                    .and_then(|t| crate::parse_walltime(t).ok()),
                nodes: queue.get("hostlist").cloned().unwrap_or_default(),
            });
        }
        Ok(SchedulerConfig {
            scheduler: NAME.into(),
            version,
            settings,
            queues,
        })
    }

    async fn apply(&self, change: &ConfigChange) -> Result<(), BatchError> {
        // Grid Engine keeps no reason with a disabled queue; the change's event records it.
        match change {
            ConfigChange::DrainNode { node, .. } => {
                check_name("node", node, "")?;
                self.qmod("-d", format!("*@{node}")).await
            }
            ConfigChange::ResumeNode { node } => {
                check_name("node", node, "")?;
                self.qmod("-e", format!("*@{node}")).await
            }
            ConfigChange::QueueState { queue, state } => {
                check_name("queue", queue, "")?;
                let flag = match state {
                    QueueState::Up => "-e",
                    QueueState::Down | QueueState::Drain => "-d",
                };
                self.qmod(flag, queue.clone()).await
            }
        }
    }
}
