//! IBM Spectrum LSF through its command-line tools: `bsub` reads the rendered script on its
//! standard input; `bjobs -o ... -json` lists every job in one call (`-a`: those finished within
//! `CLEAN_PERIOD` too, with their exit code), an array's elements each as `JOB[INDEX]`; `bkill`
//! cancels and signals (`-s`); a job is held with `bstop` (a pending job becomes PSUSP, a running
//! one is suspended) and released with `bresume`; `bhosts` and `bqueues -o ... -json` list hosts
//! and queues, `bparams -a` and `lsid` the configuration; `badmin hclose|hopen` and
//! `badmin qclose|qopen|qinact|qact` change it.

mod parse;
mod script;

use async_trait::async_trait;

use crate::system::{check_job_id, check_name};
use crate::{
    args, check_signal, Answer, BatchError, BatchSystem, Commands, ConfigChange, Job, JobFilter,
    JobSpec, Node, QueueState, Rendered, SchedulerConfig,
};

const NAME: &str = "lsf";

pub struct Lsf {
    commands: Commands,
}

impl Lsf {
    pub fn new(commands: Commands) -> Lsf {
        Lsf { commands }
    }

    /// `bjobs` of every job, or of one. LSF writes times in its local time: it is asked for
    /// UTC.
    async fn bjobs(&self, id: Option<&str>) -> Result<Vec<Job>, BatchError> {
        let mut words = args(["-a", "-u", "all", "-o", parse::BJOBS_FIELDS, "-json"]);
        words.extend(id.map(str::to_string));
        let mut commands = self.commands.clone();
        commands.env.push(("TZ".into(), "UTC".into()));
        let answer = commands.run("bjobs", &words, None).await?;
        let now = jiff::Timestamp::now().as_second();
        match parse::jobs(&answer.stdout, now) {
            Ok((jobs, missing)) if missing.is_empty() || !jobs.is_empty() => Ok(jobs),
            Ok(_) => Err(BatchError::NoSuchJob {
                id: id.unwrap_or_default().into(),
            }),
            // No JSON: "No job found" when there is none, or a refusal.
            Err(e) => {
                let message = answer.complaint();
                if message.contains("No job found") || message.contains("No unfinished job") {
                    return Ok(Vec::new());
                }
                if message.contains("is not found") {
                    return Err(BatchError::NoSuchJob {
                        id: id.unwrap_or_default().into(),
                    });
                }
                if answer.ok() {
                    return Err(e);
                }
                Err(BatchError::Refused {
                    scheduler: NAME,
                    message,
                })
            }
        }
    }

    /// `bkill`, `bstop`, `bresume` on one job (`12`, an array's element `12[3]`).
    async fn act(&self, program: &str, mut words: Vec<String>, id: &str) -> Result<(), BatchError> {
        check_job_id(id)?;
        words.push(id.to_string());
        let answer = self.commands.run(program, &words, None).await?;
        // "Job <9>: No matching job found"
        let unknown = ["No matching job", "is not found"];
        // "Job <12>: Job has already finished" may come with success's exit status.
        let finished = format!("{}{}", answer.stdout, answer.stderr).contains("already finished");
        let known = !unknown.iter().any(|u| answer.complaint().contains(u));
        if answer.ok() && !finished && known {
            return Ok(());
        }
        Err(answer.refusal(NAME, id, &unknown))
    }

    /// An operator's change: as the manager's own account, not the jobs'.
    async fn badmin(&self, words: Vec<String>) -> Result<(), BatchError> {
        let answer = self.commands.own().run("badmin", &words, None).await?;
        check_badmin(answer)
    }
}

/// badmin's answer: `Close <hostA> ...... done`, or why not.
fn check_badmin(answer: Answer) -> Result<(), BatchError> {
    let text = format!("{}\n{}", answer.stdout, answer.stderr);
    if answer.ok() && !text.contains("failed") && !text.contains("not used by the batch system") {
        return Ok(());
    }
    Err(BatchError::Refused {
        scheduler: NAME,
        message: answer.complaint(),
    })
}

#[async_trait]
impl BatchSystem for Lsf {
    fn name(&self) -> &'static str {
        NAME
    }

    fn render(&self, spec: &JobSpec) -> Result<Rendered, BatchError> {
        spec.check()?;
        Ok(Rendered {
            script: script::script(spec),
            command: args(["bsub"]),
        })
    }

    async fn submit(&self, spec: &JobSpec) -> Result<String, BatchError> {
        let rendered = self.render(spec)?;
        let out = self
            .commands
            .run_ok(NAME, "bsub", &rendered.command[1..], Some(&rendered.script))
            .await?;
        // `Job <12> is submitted to default queue <normal>.`
        let id = out
            .split_once("Job <")
            .and_then(|(_, rest)| rest.split_once('>'))
            .map(|(id, _)| id);
        match id {
            Some(id) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(id.to_string())
            }
            _ => Err(BatchError::parse("bsub", "no job id", &out)),
        }
    }

    async fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, BatchError> {
        let mut jobs = self.bjobs(None).await?;
        jobs.retain(|j| filter.matches(j));
        Ok(jobs)
    }

    async fn job(&self, id: &str) -> Result<Job, BatchError> {
        check_job_id(id)?;
        self.bjobs(Some(id))
            .await?
            .into_iter()
            .find(|j| j.id == id)
            .ok_or_else(|| BatchError::NoSuchJob { id: id.into() })
    }

    async fn cancel(&self, id: &str) -> Result<(), BatchError> {
        self.act("bkill", Vec::new(), id).await
    }

    async fn hold(&self, id: &str) -> Result<(), BatchError> {
        self.act("bstop", Vec::new(), id).await
    }

    async fn release(&self, id: &str) -> Result<(), BatchError> {
        self.act("bresume", Vec::new(), id).await
    }

    async fn signal(&self, id: &str, signal: &str) -> Result<(), BatchError> {
        let signal = check_signal(signal)?;
        self.act("bkill", vec!["-s".into(), signal.into()], id)
            .await
    }

    async fn nodes(&self) -> Result<Vec<Node>, BatchError> {
        let words = args(["-o", parse::BHOSTS_FIELDS, "-json"]);
        let text = self.commands.run_ok(NAME, "bhosts", &words, None).await?;
        parse::nodes(&text)
    }

    async fn config(&self) -> Result<SchedulerConfig, BatchError> {
        let text = self
            .commands
            .run_ok(NAME, "bparams", &args(["-a"]), None)
            .await?;
        let settings = parse::params(&text);
        let lsid = self.commands.run_ok(NAME, "lsid", &[], None).await?;
        let words = args(["-o", parse::BQUEUES_FIELDS, "-json"]);
        let text = self.commands.run_ok(NAME, "bqueues", &words, None).await?;
        // `DEFAULT_QUEUE = normal short`: any of them.
        let default: Vec<&str> = settings
            .get("DEFAULT_QUEUE")
            .map(|q| q.split_whitespace().collect())
            .unwrap_or_default();
        let queues = parse::queues(&text, &default)?;
        Ok(SchedulerConfig {
            scheduler: NAME.into(),
            version: parse::version(&lsid),
            settings,
            queues,
        })
    }

    async fn apply(&self, change: &ConfigChange) -> Result<(), BatchError> {
        match change {
            ConfigChange::DrainNode { node, reason } => {
                check_name("node", node, "")?;
                if reason.trim().is_empty() || reason.contains('\n') {
                    return Err(BatchError::invalid("reason", "give one line saying why"));
                }
                // Closed by the administrator: running jobs finish, the comment says why.
                self.badmin(vec![
                    "hclose".into(),
                    "-C".into(),
                    reason.clone(),
                    node.clone(),
                ])
                .await
            }
            ConfigChange::ResumeNode { node } => {
                check_name("node", node, "")?;
                self.badmin(vec!["hopen".into(), node.clone()]).await
            }
            ConfigChange::QueueState { queue, state } => {
                check_name("queue", queue, "")?;
                // Open/closed takes submits or not; active/inactive dispatches or not.
                let (open, active) = match state {
                    QueueState::Up => ("qopen", "qact"),
                    QueueState::Drain => ("qclose", "qact"),
                    QueueState::Down => ("qclose", "qinact"),
                };
                self.badmin(vec![open.into(), queue.clone()]).await?;
                self.badmin(vec![active.into(), queue.clone()]).await
            }
        }
    }
}
