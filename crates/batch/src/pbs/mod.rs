//! PBS (PBS Professional, OpenPBS, and Torque) through its command-line tools: `qsub` reads the
//! rendered script on its standard input; `qstat -f -F json` (PBS Pro) or `qstat -f -x` (Torque's
//! XML) lists every job, an array's subjobs with it (`-t`), and with PBS Pro's job history
//! (`-x`) the finished ones with their exit status (Torque keeps them `keep_completed` seconds);
//! `qdel`, `qhold`, `qrls`, `qsig`; `pbsnodes` for nodes and to take them offline; `qmgr` for the
//! configuration and to open and close queues. The flavor picks the options and the readers.

mod parse;
mod script;

use async_trait::async_trait;

use crate::system::{check_job_id, check_name};
use crate::{
    args, check_signal, BatchError, BatchSystem, Commands, ConfigChange, Job, JobFilter, JobSpec,
    Node, QueueState, Rendered, SchedulerConfig,
};

const NAME: &str = "pbs";

/// Which PBS: the tools share their names, not their options or output formats (PBS Pro:
/// `-F json`, `-J` arrays, job history; Torque: XML, `-t` arrays, completed jobs in state `C`).
pub use crate::PbsFlavor as Flavor;

pub struct Pbs {
    commands: Commands,
    flavor: Flavor,
    /// PBS Pro keeps finished jobs (`job_history_enable`): `qstat -x` shows them.
    history: bool,
}

impl Pbs {
    /// Without PBS Pro's job history: a finished job is known only while it is exiting (PBS
    /// Pro) or for the server's `keep_completed` (Torque). [`Pbs::connect`] asks the server.
    pub fn new(commands: Commands, flavor: Flavor) -> Pbs {
        Pbs {
            commands,
            flavor,
            history: false,
        }
    }

    /// Asks the server whether it keeps finished jobs (`job_history_enable`, PBS Pro's).
    pub async fn connect(commands: Commands, flavor: Flavor) -> Result<Pbs, BatchError> {
        let text = commands
            .run_ok(NAME, "qmgr", &args(["-c", "print server"]), None)
            .await?;
        let (settings, _) = parse::server(&text);
        let history = flavor == Flavor::PbsPro
            && settings
                .get("job_history_enable")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        Ok(Pbs {
            commands,
            flavor,
            history,
        })
    }

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// `qstat` of every job, or of one (`Some(id)`). PBS Pro writes times in its local time,
    /// so it is asked for UTC.
    async fn qstat(&self, id: Option<&str>, history: bool) -> Result<Vec<Job>, BatchError> {
        let mut words = match self.flavor {
            Flavor::PbsPro => args(["-f", "-F", "json", "-t"]),
            Flavor::Torque => args(["-f", "-x"]),
        };
        if history && self.flavor == Flavor::PbsPro {
            words.push("-x".into());
        }
        match id {
            Some(id) => words.push(id.to_string()),
            // Torque lists an array as one summary unless asked for its jobs.
            None if self.flavor == Flavor::Torque => words.push("-t".into()),
            None => {}
        }
        let mut commands = self.commands.clone();
        commands.env.push(("TZ".into(), "UTC".into()));
        let answer = commands.run("qstat", &words, None).await?;
        if !answer.ok() {
            let message = answer.complaint();
            if message.contains("Unknown Job Id") {
                return Err(BatchError::NoSuchJob {
                    id: id.unwrap_or_default().into(),
                });
            }
            // PBS Pro keeps it after all: "... Job has finished, use -x or -H ...".
            if message.contains("use -x") && !history {
                return Box::pin(self.qstat(id, true)).await;
            }
            return Err(BatchError::Refused {
                scheduler: NAME,
                message,
            });
        }
        match self.flavor {
            Flavor::PbsPro => parse::pbspro_jobs(&answer.stdout),
            // Torque prints nothing at all when there is no job.
            Flavor::Torque if answer.stdout.trim().is_empty() => Ok(Vec::new()),
            Flavor::Torque => parse::torque_jobs(&answer.stdout),
        }
    }

    /// `qdel`, `qhold`, `qrls`, `qsig` on one job.
    async fn act(&self, program: &str, mut words: Vec<String>, id: &str) -> Result<(), BatchError> {
        check_job_id(id)?;
        words.push(id.to_string());
        let answer = self.commands.run(program, &words, None).await?;
        if answer.ok() {
            return Ok(());
        }
        // PBS Pro: "qdel: Unknown Job Id 9.pbs1"; Torque: "... Unknown Job Id Error 9.t1".
        Err(answer.refusal(NAME, id, &["Unknown Job Id"]))
    }
}

/// Whether `listed` (`12.pbs1`, `7[3].pbs1`) is the job asked for as `asked` (with or without
/// the server's name).
fn same_job(listed: &str, asked: &str) -> bool {
    listed == asked || listed.split_once('.').is_some_and(|(seq, _)| seq == asked)
}

#[async_trait]
impl BatchSystem for Pbs {
    fn name(&self) -> &'static str {
        NAME
    }

    fn render(&self, spec: &JobSpec) -> Result<Rendered, BatchError> {
        spec.check()?;
        Ok(Rendered {
            script: script::script(spec, self.flavor),
            command: args(["qsub"]),
        })
    }

    async fn submit(&self, spec: &JobSpec) -> Result<String, BatchError> {
        let rendered = self.render(spec)?;
        let out = self
            .commands
            .run_ok(NAME, "qsub", &rendered.command[1..], Some(&rendered.script))
            .await?;
        // `12.pbs1`, an array's `13[].pbs1`.
        let id = out.lines().map(str::trim).rfind(|l| !l.is_empty());
        match id {
            Some(id) if crate::is_job_id(id) => Ok(id.to_string()),
            _ => Err(BatchError::parse("qsub", "no job id", &out)),
        }
    }

    async fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, BatchError> {
        let mut jobs = self.qstat(None, self.history).await?;
        jobs.retain(|j| filter.matches(j));
        Ok(jobs)
    }

    async fn job(&self, id: &str) -> Result<Job, BatchError> {
        check_job_id(id)?;
        self.qstat(Some(id), self.history)
            .await?
            .into_iter()
            .find(|j| same_job(&j.id, id))
            .ok_or_else(|| BatchError::NoSuchJob { id: id.into() })
    }

    async fn cancel(&self, id: &str) -> Result<(), BatchError> {
        self.act("qdel", Vec::new(), id).await
    }

    async fn hold(&self, id: &str) -> Result<(), BatchError> {
        self.act("qhold", Vec::new(), id).await
    }

    async fn release(&self, id: &str) -> Result<(), BatchError> {
        self.act("qrls", Vec::new(), id).await
    }

    async fn signal(&self, id: &str, signal: &str) -> Result<(), BatchError> {
        let signal = check_signal(signal)?;
        self.act("qsig", vec!["-s".into(), format!("SIG{signal}")], id)
            .await
    }

    async fn nodes(&self) -> Result<Vec<Node>, BatchError> {
        match self.flavor {
            Flavor::PbsPro => {
                let text = self
                    .commands
                    .run_ok(NAME, "pbsnodes", &args(["-a", "-F", "json"]), None)
                    .await?;
                parse::pbspro_nodes(&text)
            }
            Flavor::Torque => {
                let text = self
                    .commands
                    .run_ok(NAME, "pbsnodes", &args(["-x"]), None)
                    .await?;
                parse::torque_nodes(&text)
            }
        }
    }

    async fn config(&self) -> Result<SchedulerConfig, BatchError> {
        let text = self
            .commands
            .run_ok(NAME, "qmgr", &args(["-c", "print server"]), None)
            .await?;
        let (settings, queues) = parse::server(&text);
        // PBS Pro prints `pbs_version = 2023.1.1`; Torque `Version: 6.1.3` on standard error.
        let answer = self
            .commands
            .run("qstat", &args(["--version"]), None)
            .await?;
        let version = format!("{}\n{}", answer.stdout, answer.stderr)
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("pbs_version =")
                    .or_else(|| l.trim().strip_prefix("Version:"))
                    .map(|v| v.trim().to_string())
            });
        Ok(SchedulerConfig {
            scheduler: NAME.into(),
            version,
            settings,
            queues,
        })
    }

    async fn apply(&self, change: &ConfigChange) -> Result<(), BatchError> {
        let (program, words) = match change {
            ConfigChange::DrainNode { node, reason } => {
                check_name("node", node, "")?;
                if reason.trim().is_empty() || reason.contains('\n') {
                    return Err(BatchError::invalid("reason", "give one line saying why"));
                }
                // Offline: running jobs finish, no new one starts; the reason is the node's
                // comment (PBS Pro) or note (Torque).
                let note = match self.flavor {
                    Flavor::PbsPro => "-C",
                    Flavor::Torque => "-N",
                };
                let words = vec!["-o".into(), note.into(), reason.clone(), node.clone()];
                ("pbsnodes", words)
            }
            ConfigChange::ResumeNode { node } => {
                check_name("node", node, "")?;
                let clear = match self.flavor {
                    Flavor::PbsPro => "-r",
                    Flavor::Torque => "-c",
                };
                ("pbsnodes", vec![clear.into(), node.clone()])
            }
            ConfigChange::QueueState { queue, state } => {
                check_name("queue", queue, "")?;
                // `enabled` takes submits, `started` starts the queued.
                let (enabled, started) = match state {
                    QueueState::Up => ("True", "True"),
                    QueueState::Drain => ("False", "True"),
                    QueueState::Down => ("False", "False"),
                };
                let directive =
                    format!("set queue {queue} enabled = {enabled}, started = {started}");
                ("qmgr", vec!["-c".into(), directive])
            }
        };
        // The scheduler's settings are an operator's, not the jobs' account's.
        self.commands
            .own()
            .run_ok(NAME, program, &words, None)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_with_or_without_the_server() {
        assert!(same_job("12.pbs1", "12"));
        assert!(same_job("12.pbs1", "12.pbs1"));
        assert!(same_job("7[3].pbs1", "7[3]"));
        assert!(!same_job("7[3].pbs1", "7"));
        assert!(!same_job("120.pbs1", "12"));
    }
}
