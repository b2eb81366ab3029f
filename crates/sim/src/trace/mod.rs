//! Workload traces: the jobs a cluster was given (when, for how long, asking for what, by whom),
//! read from a published log or a site's own export so the simulator can replay them.
//!
//! - `swf`: the Standard Workload Format of the Parallel Workloads Archive.
//! - `csv`: a plain CSV with named columns, for sites' own exports.
//!
//! Readers are pure (text in, [`Trace`] out); [`read`] is the one convenience that opens a file.
//! A line that cannot be read is either collected in [`Trace::malformed`] and skipped, so that a
//! long archive log with a few damaged lines stays usable, or, when reading strictly, the error.

mod csv;
mod swf;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use corral_core::{Quantity, SlotName, Slots};

pub use self::csv::parse_csv;
pub use self::swf::parse_swf;

/// One job of a trace, as the simulator replays it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceJob {
    /// The SWF job number, or the CSV line number (which identifies a line of an export).
    pub id: u64,
    /// Seconds from the trace's start.
    pub submit_secs: u64,
    /// How long the job ran, in seconds; always more than 0 (jobs that never ran are skipped).
    pub duration_secs: u64,
    pub request: Slots,
    /// `u<user id>` for SWF (the archive anonymises users as numbers), the CSV's text, or
    /// `unknown`.
    pub owner: String,
    /// The wait the trace itself recorded (SWF field 3), to compare a simulation against.
    pub recorded_wait_secs: Option<u64>,
}

/// Jobs left out because they never ran, so there is nothing to replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Cancelled before they started (SWF status 5 without a run time).
    pub cancelled: usize,
    /// No run time, or a run time of 0.
    pub no_run_time: usize,
}

/// A line that could not be read, kept so a report can say what was left out and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// 1-based line number in the text.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// The `; Key: value` lines at the top of an SWF log: the machine's size, and what the archive
/// says about the log (kept for reports).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwfHeader {
    pub max_nodes: Option<u64>,
    pub max_procs: Option<u64>,
    /// Every other key; a key given more than once (`Queue`, `Partition`) keeps its values in
    /// order, one per line.
    pub fields: BTreeMap<String, String>,
}

/// A whole trace: the jobs to replay, in submit order, and an account of what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// Sorted by `(submit_secs, id)`: logs are mostly but not always in submit order.
    pub jobs: Vec<TraceJob>,
    pub skipped: Skipped,
    pub malformed: Vec<Malformed>,
    /// The SWF header; the default for CSV, which has none.
    pub header: SwfHeader,
    /// SWF job lines with more fields than the format's 18 (some archive logs add their
    /// own): their first 18 were read.
    pub extra_fields: u64,
}

/// The trace formats read here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Swf,
    Csv,
}

impl Format {
    /// The format a file's extension suggests (`.swf`, `.csv`, in any case), if any.
    pub fn from_path(path: &Path) -> Option<Format> {
        let extension = path.extension()?.to_str()?;
        if extension.eq_ignore_ascii_case("swf") {
            Some(Format::Swf)
        } else if extension.eq_ignore_ascii_case("csv") {
            Some(Format::Csv)
        } else {
            None
        }
    }
}

/// Why a trace could not be read. Each names the file, the line or the columns at fault.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read the trace {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("line {line}: {message}")]
    Malformed { line: usize, message: String },
    #[error(
        "the CSV trace has no header line; it must name the columns {}",
        csv::COLUMNS_HELP
    )]
    NoCsvHeader,
    #[error("unknown CSV column(s) {0:?}; the columns are {help}", help = csv::COLUMNS_HELP)]
    UnknownColumns(Vec<String>),
    #[error("the CSV header lacks the column(s) {0:?}; the columns are {help}", help = csv::COLUMNS_HELP)]
    MissingColumns(Vec<String>),
    #[error("the CSV header names the column {0:?} twice")]
    DuplicateColumn(String),
}

/// Reads a trace file. Reading strictly, the first malformed line is the error; otherwise such
/// lines are collected in [`Trace::malformed`].
pub fn read(path: impl AsRef<Path>, format: Format, strict: bool) -> Result<Trace, TraceError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    match format {
        Format::Swf => parse_swf(&text, strict),
        Format::Csv => parse_csv(&text, strict),
    }
}

/// What one job line comes to.
pub(crate) enum LineOutcome {
    Job(TraceJob),
    Cancelled,
    NoRunTime,
}

/// Gathers the readers' results line by line, so both formats skip, count, collect and sort
/// the same way.
pub(crate) struct Collector {
    strict: bool,
    jobs: Vec<TraceJob>,
    skipped: Skipped,
    malformed: Vec<Malformed>,
}

impl Collector {
    pub(crate) fn new(strict: bool) -> Self {
        Collector {
            strict,
            jobs: Vec::new(),
            skipped: Skipped::default(),
            malformed: Vec::new(),
        }
    }

    /// Keeps or counts one job line, or records why it could not be read.
    pub(crate) fn record(
        &mut self,
        line: usize,
        outcome: Result<LineOutcome, String>,
    ) -> Result<(), TraceError> {
        match outcome {
            Ok(LineOutcome::Job(job)) => self.jobs.push(job),
            Ok(LineOutcome::Cancelled) => self.skipped.cancelled += 1,
            Ok(LineOutcome::NoRunTime) => self.skipped.no_run_time += 1,
            Err(message) => self.malformed(line, message)?,
        }
        Ok(())
    }

    /// A line that could not be read: the error when strict, else kept for the report.
    pub(crate) fn malformed(&mut self, line: usize, message: String) -> Result<(), TraceError> {
        if self.strict {
            return Err(TraceError::Malformed { line, message });
        }
        self.malformed.push(Malformed { line, message });
        Ok(())
    }

    pub(crate) fn finish(mut self, header: SwfHeader) -> Trace {
        self.jobs.sort_by_key(|job| (job.submit_secs, job.id));
        Trace {
            jobs: self.jobs,
            skipped: self.skipped,
            malformed: self.malformed,
            header,
            extra_fields: 0,
        }
    }
}

/// Why a number in a trace could not be read; the caller names the field and quotes the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NumberError {
    #[error("is not a number")]
    NotANumber,
    #[error("is too large")]
    TooLarge,
}

/// A decimal such as `-1`, `42` or `552.21`, rounded down to a whole number. Archive logs write
/// some fields with fractions, and every number read here counts whole seconds, processors or
/// kilobytes. Exact (no float), and no exponents, `inf` or `NaN`.
pub(crate) fn parse_rounded_down(text: &str) -> Result<i64, NumberError> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole_digits, fraction_digits) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole_digits.is_empty() && fraction_digits.is_empty())
        || !all_digits(whole_digits)
        || !all_digits(fraction_digits)
    {
        return Err(NumberError::NotANumber);
    }
    let whole: i64 = if whole_digits.is_empty() {
        0
    } else {
        // Only digits are left, so the one way to fail is overflow.
        whole_digits.parse().map_err(|_| NumberError::TooLarge)?
    };
    let has_fraction = fraction_digits.bytes().any(|b| b != b'0');
    Ok(if negative {
        // Down is away from zero for negative numbers: -0.5 is -1.
        -whole - i64::from(has_fraction)
    } else {
        whole
    })
}

/// The slot names the readers fill in.
pub(crate) fn slot_name(name: &'static str) -> SlotName {
    SlotName::new(name).expect("the readers' slot names are valid")
}

/// A request from its amounts; zero or absent amounts are left out, as `Slots` stores them.
pub(crate) fn request(amounts: [(&'static str, Option<Quantity>); 3]) -> Slots {
    let mut slots = Slots::new();
    for (name, amount) in amounts {
        if let Some(amount) = amount {
            slots.set(slot_name(name), amount);
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_is_guessed_from_the_extension() {
        assert_eq!(
            Format::from_path(Path::new("logs/HPC2N.swf")),
            Some(Format::Swf)
        );
        assert_eq!(Format::from_path(Path::new("a.SWF")), Some(Format::Swf));
        assert_eq!(Format::from_path(Path::new("jobs.csv")), Some(Format::Csv));
        assert_eq!(Format::from_path(Path::new("jobs.swf.gz")), None);
        assert_eq!(Format::from_path(Path::new("jobs")), None);
    }

    #[test]
    fn numbers_are_rounded_down_and_checked() {
        assert_eq!(parse_rounded_down("42"), Ok(42));
        assert_eq!(parse_rounded_down("+42"), Ok(42));
        assert_eq!(parse_rounded_down("-1"), Ok(-1));
        assert_eq!(parse_rounded_down("552.21"), Ok(552));
        assert_eq!(parse_rounded_down("9.999"), Ok(9));
        assert_eq!(parse_rounded_down("1."), Ok(1));
        assert_eq!(parse_rounded_down(".5"), Ok(0));
        assert_eq!(parse_rounded_down("-0.5"), Ok(-1));
        assert_eq!(parse_rounded_down("-2.0"), Ok(-2));
        for bad in [
            "", ".", "-", "abc", "1e5", "inf", "NaN", "1.2.3", "1,5", "--1",
        ] {
            assert_eq!(
                parse_rounded_down(bad),
                Err(NumberError::NotANumber),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_rounded_down("99999999999999999999"),
            Err(NumberError::TooLarge)
        );
    }

    #[test]
    fn read_opens_the_file_and_names_it_when_it_cannot() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("tiny.swf");
        std::fs::write(
            &path,
            "; MaxProcs: 4\n1 0 5 60 2 -1 -1 2 -1 -1 1 7 -1 -1 -1 -1 -1 -1\n",
        )
        .expect("the trace is written");
        let trace = read(&path, Format::Swf, true).expect("the trace reads");
        assert_eq!(trace.header.max_procs, Some(4));
        assert_eq!(trace.jobs.len(), 1);

        let missing = dir.path().join("missing.csv");
        let err = read(&missing, Format::Csv, false).expect_err("no such file");
        assert!(matches!(err, TraceError::Io { .. }), "{err:?}");
        assert!(
            err.to_string().contains("missing.csv"),
            "the error names the file: {err}"
        );
    }
}
