//! Which batch system a scaling group is bound to, and how its commands are run: what the API
//! and the CLI carry, checked before anything is stored, naming the field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::BatchError;

/// The batch systems Corral speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SystemName {
    Slurm,
    #[serde(rename = "gridengine")]
    GridEngine,
    /// PBS Professional, OpenPBS or Torque (`options.flavor`).
    Pbs,
    Lsf,
    /// A site's own plugin (`options.command`), speaking JSON on stdin/stdout.
    Exec,
}

impl SystemName {
    /// The variable that holds a job's own id in its environment (a plugin sets
    /// `CORRAL_BATCH_JOB_ID` for its jobs, docs/plugins.md): how a pilot job names itself.
    pub fn job_id_variable(self) -> &'static str {
        match self {
            SystemName::Slurm => "SLURM_JOB_ID",
            SystemName::GridEngine => "JOB_ID",
            SystemName::Pbs => "PBS_JOBID",
            SystemName::Lsf => "LSB_JOBID",
            SystemName::Exec => "CORRAL_BATCH_JOB_ID",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SystemName::Slurm => "slurm",
            SystemName::GridEngine => "gridengine",
            SystemName::Pbs => "pbs",
            SystemName::Lsf => "lsf",
            SystemName::Exec => "exec",
        }
    }
}

/// A group's batch system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    pub system: SystemName,
    #[serde(default)]
    pub options: BatchOptions,
}

/// How the scheduler's commands are run. None of these is a secret: the command-line adaptors
/// act as the manager's Unix user.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchOptions {
    /// The directory of the scheduler's commands, absolute [default: the manager's PATH].
    #[serde(default)]
    pub bin_dir: Option<String>,
    /// The longest one command may take before it is killed [default: 30; 1 to 3600].
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 3600))]
    pub timeout_secs: Option<u64>,
    /// Variables set for every command (`SLURM_CONF`, `SGE_ROOT`, `SGE_CELL`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Grid Engine: the parallel environment for jobs of more than one slot.
    #[serde(default)]
    pub parallel_environment: Option<String>,
    /// The Unix account the scheduler's commands run as, and so its jobs. Required, unless
    /// `run_as_manager` is set: jobs run as the manager's account could read its data.
    #[serde(default)]
    pub run_as: Option<String>,
    /// Without `run_as`: run the jobs as the manager's own account, knowing that they can read
    /// what it can (its database, its admin token) [default: false]. Refused when the manager
    /// runs as root.
    #[serde(default)]
    pub run_as_manager: bool,
    /// PBS: `pbspro` (also OpenPBS) or `torque` [default: pbspro].
    #[serde(default)]
    pub flavor: Option<PbsFlavor>,
    /// exec: the plugin, an absolute path (docs/plugins.md).
    #[serde(default)]
    pub command: Option<String>,
    /// Where jobs with files staged or collected get their directories,
    /// `WORK_DIR/<user>/<random>`: absolute, on a file system the manager's host and the nodes
    /// share [default: none; such jobs are refused].
    #[serde(default)]
    pub work_dir: Option<String>,
    /// Sessions submitted to the group run as jobs of this system, each in
    /// `WORK_DIR/<user>/<session>` (so it needs `work_dir`) [default: false].
    #[serde(default)]
    pub sessions: bool,
}

/// Which PBS: they differ in output formats, arrays and what they keep of finished jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PbsFlavor {
    /// PBS Professional and OpenPBS.
    #[serde(rename = "pbspro", alias = "openpbs")]
    PbsPro,
    Torque,
}

pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// The longest `timeout_secs`.
pub const MAX_TIMEOUT_SECS: u64 = 3600;

impl BatchConfig {
    /// Reads a configuration from JSON, naming the field that does not hold.
    pub fn parse_json(text: &str) -> Result<BatchConfig, BatchError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let config: BatchConfig = serde_path_to_error::deserialize(de)
            .map_err(|e| BatchError::invalid(e.path().to_string(), e.inner().to_string()))?;
        config.check()?;
        Ok(config)
    }

    /// Checks what the types cannot say, as the manager (this process) would run the binding;
    /// fields are named as in the body (`options.env`).
    pub fn check(&self) -> Result<(), BatchError> {
        self.check_as(manager_is_root())
    }

    /// [`BatchConfig::check`] for a manager that runs as root, or not: a binding without
    /// `run_as` would run every user's jobs as the manager's account.
    pub fn check_as(&self, manager_is_root: bool) -> Result<(), BatchError> {
        self.check_fields()?;
        let o = &self.options;
        match (&o.run_as, o.run_as_manager) {
            (Some(_), true) => Err(BatchError::invalid(
                "options.run_as_manager",
                "give run_as, or run_as_manager, not both",
            )),
            (None, false) => Err(BatchError::invalid(
                "options.run_as",
                "give the Unix account the jobs run as: without one they would run as the \
                 manager's account and could read its data (run_as_manager: true runs them so \
                 on purpose)",
            )),
            (None, true) if manager_is_root => Err(BatchError::invalid(
                "options.run_as",
                "the manager runs as root: jobs run as its account would run as root; give \
                 the Unix account the jobs run as",
            )),
            _ => Ok(()),
        }
    }

    /// Each field on its own.
    fn check_fields(&self) -> Result<(), BatchError> {
        let o = &self.options;
        for (field, dir) in [
            ("options.bin_dir", &o.bin_dir),
            ("options.work_dir", &o.work_dir),
        ] {
            if let Some(dir) = dir {
                if !dir.starts_with('/') || dir.contains('\0') {
                    return Err(BatchError::invalid(
                        field,
                        format!("{dir:?} is not an absolute path"),
                    ));
                }
            }
        }
        if o.sessions && o.work_dir.is_none() {
            return Err(BatchError::invalid(
                "options.sessions",
                "sessions run in directories under options.work_dir: give one",
            ));
        }
        if let Some(secs) = o.timeout_secs {
            if !(1..=MAX_TIMEOUT_SECS).contains(&secs) {
                return Err(BatchError::invalid(
                    "options.timeout_secs",
                    format!("{secs} is not between 1 and {MAX_TIMEOUT_SECS}"),
                ));
            }
        }
        for (name, value) in &o.env {
            let variable = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !variable {
                return Err(BatchError::invalid(
                    "options.env",
                    format!("{name:?} is not a variable's name"),
                ));
            }
            if value.contains('\0') {
                return Err(BatchError::invalid(
                    format!("options.env.{name}"),
                    "contains a NUL character",
                ));
            }
        }
        if let Some(pe) = &o.parallel_environment {
            if self.system != SystemName::GridEngine {
                return Err(BatchError::invalid(
                    "options.parallel_environment",
                    format!("only gridengine takes it, not {}", self.system.as_str()),
                ));
            }
            let name = !pe.is_empty()
                && pe
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
            if !name {
                return Err(BatchError::invalid(
                    "options.parallel_environment",
                    format!("{pe:?} is not a name"),
                ));
            }
        }
        if let Some(account) = &o.run_as {
            let unix_name = account.len() <= 32
                && account.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                && account
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c));
            if !unix_name {
                return Err(BatchError::invalid(
                    "options.run_as",
                    format!("{account:?} is not a Unix account's name"),
                ));
            }
        }
        if o.flavor.is_some() && self.system != SystemName::Pbs {
            return Err(BatchError::invalid(
                "options.flavor",
                format!("only pbs takes it, not {}", self.system.as_str()),
            ));
        }
        match (&o.command, self.system) {
            (None, SystemName::Exec) => {
                return Err(BatchError::invalid(
                    "options.command",
                    "exec needs the plugin's absolute path",
                ));
            }
            (Some(_), system) if system != SystemName::Exec => {
                return Err(BatchError::invalid(
                    "options.command",
                    format!("only exec takes it, not {}", system.as_str()),
                ));
            }
            (Some(command), _) if !command.starts_with('/') || command.contains('\0') => {
                return Err(BatchError::invalid(
                    "options.command",
                    format!("{command:?} is not an absolute path"),
                ));
            }
            _ => {}
        }
        if o.bin_dir.is_some() && self.system == SystemName::Exec {
            return Err(BatchError::invalid(
                "options.bin_dir",
                "exec runs options.command, not commands of a directory",
            ));
        }
        Ok(())
    }
}

/// Whether this process runs as root (without the adaptors, which run nothing: no).
fn manager_is_root() -> bool {
    #[cfg(feature = "adaptors")]
    {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() == 0 }
    }
    #[cfg(not(feature = "adaptors"))]
    {
        false
    }
}

#[cfg(feature = "adaptors")]
impl BatchConfig {
    /// How the binding runs commands: the adaptor's, and its jobs' files ([`crate::staging`]).
    pub fn commands(&self) -> crate::Commands {
        let o = &self.options;
        crate::Commands {
            bin_dir: o.bin_dir.as_ref().map(Into::into),
            timeout: std::time::Duration::from_secs(o.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS)),
            env: o.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            run_as: o.run_as.clone(),
        }
    }

    /// The adaptor for this configuration; Slurm is asked where it keeps finished jobs.
    pub async fn connect(&self) -> Result<Box<dyn crate::BatchSystem>, BatchError> {
        self.check()?;
        let o = &self.options;
        let commands = self.commands();
        Ok(match self.system {
            SystemName::Slurm => Box::new(crate::slurm::Slurm::connect(commands).await?),
            SystemName::GridEngine => Box::new(crate::gridengine::GridEngine::new(
                commands,
                o.parallel_environment.clone(),
            )),
            SystemName::Pbs => {
                let flavor = o.flavor.unwrap_or(PbsFlavor::PbsPro);
                Box::new(crate::pbs::Pbs::connect(commands, flavor).await?)
            }
            SystemName::Lsf => Box::new(crate::lsf::Lsf::new(commands)),
            // check() made sure there is one.
            SystemName::Exec => Box::new(crate::exec::Exec::new(
                commands,
                o.command.clone().unwrap_or_default().into(),
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(text: &str) -> String {
        match BatchConfig::parse_json(text).unwrap_err() {
            BatchError::InvalidSpec { field, .. } => field,
            e => panic!("{e}"),
        }
    }

    #[test]
    fn a_configuration_reads_and_bad_fields_are_named() {
        let c = BatchConfig::parse_json(
            r#"{"system": "gridengine", "options": {"env": {"SGE_ROOT": "/var/lib/gridengine"},
                "parallel_environment": "smp", "timeout_secs": 10, "run_as": "corral-batch"}}"#,
        )
        .unwrap();
        assert_eq!(c.system, SystemName::GridEngine);
        assert_eq!(c.options.timeout_secs, Some(10));
        assert_eq!(field_of(r#"{"system": "moab"}"#), "system");
        let openpbs = r#"{"system": "pbs", "options": {"flavor": "openpbs", "run_as": "b"}}"#;
        assert_eq!(
            BatchConfig::parse_json(openpbs).unwrap().options.flavor,
            Some(PbsFlavor::PbsPro)
        );
        let torque = r#"{"system": "pbs", "options": {"flavor": "torque", "run_as": "b"}}"#;
        assert_eq!(
            BatchConfig::parse_json(torque).unwrap().options.flavor,
            Some(PbsFlavor::Torque)
        );
        assert_eq!(
            field_of(r#"{"system": "lsf", "options": {"flavor": "torque"}}"#),
            "options.flavor"
        );
        assert_eq!(
            field_of(r#"{"system": "slurm", "options": {"run_as": "-root"}}"#),
            "options.run_as"
        );
        assert_eq!(
            field_of(r#"{"system": "slurm", "options": {"colour": 1}}"#),
            "options.colour"
        );
        assert_eq!(
            field_of(r#"{"system": "slurm", "options": {"bin_dir": "bin"}}"#),
            "options.bin_dir"
        );
        assert_eq!(
            field_of(r#"{"system": "slurm", "options": {"timeout_secs": 0}}"#),
            "options.timeout_secs"
        );
        assert_eq!(
            field_of(r#"{"system": "slurm", "options": {"env": {"A=B": "x"}}}"#),
            "options.env"
        );
        assert_eq!(
            field_of(r#"{"system": "slurm", "options": {"parallel_environment": "smp"}}"#),
            "options.parallel_environment"
        );
        let exec = r#"{"system": "exec", "options": {"command": "/opt/plugin", "run_as": "b"}}"#;
        let c = BatchConfig::parse_json(exec).unwrap();
        assert_eq!(c.system.as_str(), "exec");
        assert_eq!(c.options.command.as_deref(), Some("/opt/plugin"));
        assert_eq!(field_of(r#"{"system": "exec"}"#), "options.command");
        assert_eq!(
            field_of(r#"{"system": "exec", "options": {"command": "plugin"}}"#),
            "options.command"
        );
        assert_eq!(
            field_of(r#"{"system": "slurm", "options": {"command": "/opt/plugin"}}"#),
            "options.command"
        );
        assert_eq!(
            field_of(r#"{"system": "exec", "options": {"command": "/p", "bin_dir": "/usr/bin"}}"#),
            "options.bin_dir"
        );
        assert_eq!(
            field_of(r#"{"system": "slurm", "options": {"sessions": true}}"#),
            "options.sessions"
        );
        let sessions = r#"{"system": "slurm", "options": {"sessions": true, "work_dir": "/w", "run_as": "b"}}"#;
        assert!(BatchConfig::parse_json(sessions).unwrap().options.sessions);
    }

    /// Issue 43: a binding without `run_as` ran every user's jobs as the manager's account
    /// (root). It needs `run_as`, or `run_as_manager` on purpose, which root cannot have.
    #[test]
    fn jobs_run_as_the_manager_only_on_purpose_and_never_as_root() {
        let config = |options: &str| {
            let text = format!(r#"{{"system": "slurm", "options": {options}}}"#);
            let de = &mut serde_json::Deserializer::from_str(&text);
            BatchConfig::deserialize(de).unwrap()
        };
        let field = |c: &BatchConfig, root| match c.check_as(root).unwrap_err() {
            BatchError::InvalidSpec { field, message } => format!("{field}: {message}"),
            e => panic!("{e}"),
        };
        let bare = config("{}");
        for root in [true, false] {
            let refused = field(&bare, root);
            assert!(refused.starts_with("options.run_as: "), "{refused}");
            assert!(refused.contains("run_as_manager"), "{refused}");
        }
        let on_purpose = config(r#"{"run_as_manager": true}"#);
        assert!(on_purpose.check_as(false).is_ok());
        let refused = field(&on_purpose, true);
        assert!(
            refused.starts_with("options.run_as: the manager runs as root"),
            "{refused}"
        );
        let account = config(r#"{"run_as": "corral-batch"}"#);
        assert!(account.check_as(true).is_ok() && account.check_as(false).is_ok());
        let both = config(r#"{"run_as": "corral-batch", "run_as_manager": true}"#);
        assert!(field(&both, false).starts_with("options.run_as_manager: "));
    }

    #[test]
    fn each_system_names_the_variable_of_a_jobs_own_id() {
        assert_eq!(SystemName::Slurm.job_id_variable(), "SLURM_JOB_ID");
        assert_eq!(SystemName::GridEngine.job_id_variable(), "JOB_ID");
        assert_eq!(SystemName::Pbs.job_id_variable(), "PBS_JOBID");
        assert_eq!(SystemName::Lsf.job_id_variable(), "LSB_JOBID");
        assert_eq!(SystemName::Exec.job_id_variable(), "CORRAL_BATCH_JOB_ID");
    }
}
