//! What can go wrong with a batch system, typed so that callers can tell a refused job (the
//! user's to fix) from a scheduler that is missing, slow or says something unexpected (the
//! operator's).

/// A batch system's error.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A job specification that cannot be submitted; `field` names where (`resources.nodes`).
    #[error("{field}: {message}")]
    InvalidSpec { field: String, message: String },
    /// The scheduler refused the request; its message verbatim.
    #[error("{scheduler} refused: {message}")]
    Refused {
        scheduler: &'static str,
        message: String,
    },
    /// The scheduler's command is not installed (or not on the configured path).
    #[error("{command}: not found (is the scheduler's client installed and on PATH?)")]
    CommandMissing { command: String },
    /// The command answered something this adaptor cannot read; `excerpt` quotes it.
    #[error("{command}: unexpected output ({problem}): {excerpt:?}")]
    Parse {
        command: String,
        problem: String,
        excerpt: String,
    },
    /// The command did not finish within its timeout and was killed, with what it started.
    #[error("{command}: no answer within {secs} s; killed")]
    Timeout { command: String, secs: u64 },
    /// No such job (never known, or forgotten by the scheduler and its accounting).
    #[error("no job {id}")]
    NoSuchJob { id: String },
    /// What this scheduler cannot do (signalling an LSF job array's element, say).
    #[error("{scheduler} cannot {what}")]
    Unsupported {
        scheduler: &'static str,
        what: String,
    },
    /// A job's files could not be made, written or read in its directory (the work directory
    /// missing or full, a file where a directory is needed); the command's words.
    #[error("{what}: {message}")]
    Staging { what: String, message: String },
    /// Starting or talking to the command failed.
    #[error("{command}: {source}")]
    Io {
        command: String,
        source: std::io::Error,
    },
}

impl BatchError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> BatchError {
        BatchError::InvalidSpec {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The output a parser could not read, quoted (at most 200 characters).
    pub fn parse(command: &str, problem: impl Into<String>, output: &str) -> BatchError {
        BatchError::Parse {
            command: command.into(),
            problem: problem.into(),
            excerpt: output.chars().take(200).collect(),
        }
    }
}
