//! A plain CSV trace, for a site's own exports: a header line naming the columns
//! `submit,duration,cpu,mem,gpu,owner` in any order (`mem`, `gpu` and `owner` may be left out),
//! then one job per line. Times are in seconds; amounts are in `Slots`' forms (`0.5`, `4GiB`).
//! A job's id is its line number, counting the header as line 1.

use ::csv::{ReaderBuilder, StringRecord, Trim};
use corral_core::Quantity;

use super::{
    parse_rounded_down, request, Collector, LineOutcome, SwfHeader, Trace, TraceError, TraceJob,
};

/// What the header errors tell people to write.
pub(crate) const COLUMNS_HELP: &str =
    "submit, duration and cpu (required), mem, gpu and owner (optional), in any order";

const REQUIRED: [&str; 3] = ["submit", "duration", "cpu"];
const OPTIONAL: [&str; 3] = ["mem", "gpu", "owner"];

/// Reads a CSV trace. A bad header is always the error; reading strictly, so is the first
/// malformed line, which otherwise is collected in [`Trace::malformed`].
pub fn parse_csv(text: &str, strict: bool) -> Result<Trace, TraceError> {
    let mut reader = ReaderBuilder::new()
        .has_headers(true)
        // Lines of the wrong length are reported as malformed lines, with their numbers.
        .flexible(true)
        .trim(Trim::All)
        .from_reader(text.as_bytes());
    let header = reader.headers().map_err(|e| TraceError::Malformed {
        line: LineCounter::new(text).line_at(e.position().map_or(0, |p| p.byte())),
        message: e.to_string(),
    })?;
    let columns = Columns::from_header(header)?;

    let mut collector = Collector::new(strict);
    let mut lines = LineCounter::new(text);
    let mut record = StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {
                // A blank or white-space-only line (one empty cell once trimmed) holds no job.
                if record.len() == 1 && record.get(0).is_some_and(str::is_empty) {
                    continue;
                }
                let line = lines.line_at(record.position().map_or(0, |p| p.byte()));
                collector.record(line, columns.read(line, &record))?;
            }
            Err(e) => {
                let io = e.is_io_error();
                let line = lines.line_at(e.position().map_or(0, |p| p.byte()));
                collector.malformed(line, e.to_string())?;
                // Reading from memory cannot fail again and again, but a reader that did
                // would never get past it.
                if io {
                    break;
                }
            }
        }
    }
    Ok(collector.finish(SwfHeader::default()))
}

/// 1-based line numbers from the byte offsets the CSV reader gives. Its own line numbers miss
/// `\r\n` endings and blank lines, and a record's offset is where the previous one ended, so
/// the line ends between them are stepped over first.
struct LineCounter<'a> {
    text: &'a [u8],
    offset: usize,
    line: usize,
}

impl<'a> LineCounter<'a> {
    fn new(text: &'a str) -> Self {
        LineCounter {
            text: text.as_bytes(),
            offset: 0,
            line: 1,
        }
    }

    /// The line of the first byte at or after `offset` that is not a line end. Offsets come in
    /// increasing order, so each byte is counted once.
    fn line_at(&mut self, offset: u64) -> usize {
        let mut target = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.text.len());
        while matches!(self.text.get(target), Some(b'\r' | b'\n')) {
            target += 1;
        }
        if target < self.offset {
            // Not expected; restart rather than count backwards.
            self.offset = 0;
            self.line = 1;
        }
        for (index, &byte) in self.text[self.offset..target].iter().enumerate() {
            let at = self.offset + index;
            // `\n`, `\r\n` and a lone `\r` each end a line, as they end a CSV record.
            let ends_line =
                byte == b'\n' || (byte == b'\r' && self.text.get(at + 1) != Some(&b'\n'));
            if ends_line {
                self.line += 1;
            }
        }
        self.offset = target;
        self.line
    }
}

/// Where each known column is in a line.
struct Columns {
    submit: usize,
    duration: usize,
    cpu: usize,
    mem: Option<usize>,
    gpu: Option<usize>,
    owner: Option<usize>,
    count: usize,
}

impl Columns {
    fn from_header(header: &StringRecord) -> Result<Self, TraceError> {
        if header.iter().all(str::is_empty) {
            return Err(TraceError::NoCsvHeader);
        }
        let mut positions: Vec<(&str, usize)> = Vec::new();
        let mut unknown = Vec::new();
        for (position, name) in header.iter().enumerate() {
            if !REQUIRED.contains(&name) && !OPTIONAL.contains(&name) {
                unknown.push(name.to_string());
            } else if positions.iter().any(|&(seen, _)| seen == name) {
                return Err(TraceError::DuplicateColumn(name.to_string()));
            } else {
                positions.push((name, position));
            }
        }
        if !unknown.is_empty() {
            return Err(TraceError::UnknownColumns(unknown));
        }
        let find = |name: &str| {
            positions
                .iter()
                .find(|&&(seen, _)| seen == name)
                .map(|&(_, position)| position)
        };
        let missing: Vec<String> = REQUIRED
            .iter()
            .filter(|name| find(name).is_none())
            .map(|name| name.to_string())
            .collect();
        let (Some(submit), Some(duration), Some(cpu)) =
            (find("submit"), find("duration"), find("cpu"))
        else {
            return Err(TraceError::MissingColumns(missing));
        };
        Ok(Columns {
            submit,
            duration,
            cpu,
            mem: find("mem"),
            gpu: find("gpu"),
            owner: find("owner"),
            count: header.len(),
        })
    }

    /// Reads one line into a job, or says why it is skipped or cannot be read. Every column is
    /// checked before a job is skipped, so a damaged line is reported even if it never ran.
    fn read(&self, line: usize, record: &StringRecord) -> Result<LineOutcome, String> {
        if record.len() != self.count {
            return Err(format!(
                "expected {} columns, as the header names, found {}",
                self.count,
                record.len()
            ));
        }
        let text = |position: usize| record.get(position).unwrap_or_default();
        let submit_secs = seconds("submit", text(self.submit))?;
        let duration = whole("duration", text(self.duration))?;
        let cpu = Quantity::parse("cpu", text(self.cpu)).map_err(|e| format!("column {e}"))?;
        let mem = self
            .mem
            .map(|position| optional_amount("mem", text(position)))
            .transpose()?
            .flatten();
        let gpu = self
            .gpu
            .map(|position| optional_amount("gpu", text(position)))
            .transpose()?
            .flatten();
        let owner = match self.owner.map(text) {
            Some(owner) if !owner.is_empty() => owner.to_string(),
            _ => "unknown".to_string(),
        };

        if duration <= 0 {
            return Ok(LineOutcome::NoRunTime);
        }
        // As in SWF, a job that asks for no processor is not one the simulator can place.
        if cpu.is_zero() {
            return Err("column cpu: must be more than 0".to_string());
        }
        Ok(LineOutcome::Job(TraceJob {
            id: line as u64,
            submit_secs,
            duration_secs: duration.unsigned_abs(),
            request: request([("cpu", Some(cpu)), ("mem", mem), ("gpu", gpu)]),
            owner,
            recorded_wait_secs: None,
        }))
    }
}

/// A whole number in a column; decimals are rounded down.
fn whole(column: &str, text: &str) -> Result<i64, String> {
    if text.is_empty() {
        return Err(format!("column {column}: is empty"));
    }
    parse_rounded_down(text).map_err(|e| format!("column {column}: {text:?} {e}"))
}

/// Non-negative seconds in a column.
fn seconds(column: &str, text: &str) -> Result<u64, String> {
    u64::try_from(whole(column, text)?)
        .map_err(|_| format!("column {column}: {text:?} is negative"))
}

/// An amount in `Slots`' forms, or nothing when the cell is empty.
fn optional_amount(column: &'static str, text: &str) -> Result<Option<Quantity>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    // `SlotError` starts with the slot's name, which is the column's.
    Quantity::parse(column, text)
        .map(Some)
        .map_err(|e| format!("column {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Malformed, Skipped};

    fn parse(text: &str) -> Trace {
        parse_csv(text, false).expect("the header is good")
    }

    fn requests(trace: &Trace) -> Vec<String> {
        trace
            .jobs
            .iter()
            .map(|job| job.request.to_string())
            .collect()
    }

    #[test]
    fn lines_become_jobs_numbered_by_line() {
        let text = "submit,duration,cpu,mem,gpu,owner\n\
                    0,3600,2,4GiB,0.5,alice\n\
                    10,60,0.5,,,\n";
        let trace = parse_csv(text, true).expect("well formed");
        assert_eq!(
            trace.jobs,
            vec![
                TraceJob {
                    id: 2,
                    submit_secs: 0,
                    duration_secs: 3600,
                    request: "cpu=2,mem=4GiB,gpu=0.5".parse().expect("valid slots"),
                    owner: "alice".into(),
                    recorded_wait_secs: None,
                },
                TraceJob {
                    id: 3,
                    submit_secs: 10,
                    duration_secs: 60,
                    request: "cpu=0.5".parse().expect("valid slots"),
                    owner: "unknown".into(),
                    recorded_wait_secs: None,
                },
            ]
        );
        assert_eq!(trace.skipped, Skipped::default());
        assert_eq!(trace.header, SwfHeader::default());
    }

    #[test]
    fn columns_may_come_in_any_order_and_optional_ones_be_left_out() {
        let trace = parse("owner, cpu ,submit,duration\nbob,4,5,100\n");
        assert_eq!(requests(&trace), vec!["cpu=4"]);
        assert_eq!(trace.jobs[0].owner, "bob");
        assert_eq!(trace.jobs[0].submit_secs, 5);

        let trace = parse("gpu,duration,mem,cpu,submit\n1,100,512MiB,8,0\n");
        assert_eq!(requests(&trace), vec!["cpu=8,gpu=1,mem=512MiB"]);
        assert_eq!(trace.jobs[0].owner, "unknown");
    }

    #[test]
    fn zero_amounts_are_left_out() {
        let trace = parse("submit,duration,cpu,mem,gpu\n0,100,1,0,0\n");
        assert_eq!(requests(&trace), vec!["cpu=1"]);
    }

    #[test]
    fn bad_headers_name_the_columns() {
        let err = parse_csv("submit,duration,cpu,nodes,queue\n0,1,1,1,a\n", false)
            .expect_err("unknown columns");
        assert!(
            matches!(&err, TraceError::UnknownColumns(c) if c == &["nodes", "queue"]),
            "{err:?}"
        );
        assert!(err.to_string().contains("\"nodes\""), "{err}");

        let err = parse_csv("duration,mem\n", false).expect_err("missing columns");
        assert!(
            matches!(&err, TraceError::MissingColumns(c) if c == &["submit", "cpu"]),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "the CSV header lacks the column(s) [\"submit\", \"cpu\"]; the columns are \
             submit, duration and cpu (required), mem, gpu and owner (optional), in any order"
        );

        let err = parse_csv("submit,cpu,duration,cpu\n", false).expect_err("cpu twice");
        assert!(
            matches!(&err, TraceError::DuplicateColumn(c) if c == "cpu"),
            "{err:?}"
        );

        for empty in ["", "\n\n"] {
            let err = parse_csv(empty, false).expect_err("no header");
            assert!(matches!(err, TraceError::NoCsvHeader), "{err:?}");
        }
        let err = parse_csv("Submit,Duration,CPU\n", false).expect_err("names are exact");
        assert!(matches!(err, TraceError::UnknownColumns(_)), "{err:?}");
    }

    #[test]
    fn times_are_whole_seconds_rounded_down_and_jobs_without_one_skipped() {
        let text = "submit,duration,cpu\n\
                    1.9,59.99,1\n\
                    0,0,1\n\
                    0,-1,1\n\
                    0,0.5,1\n";
        let trace = parse_csv(text, true).expect("well formed");
        assert_eq!(trace.jobs.len(), 1);
        assert_eq!(trace.jobs[0].submit_secs, 1);
        assert_eq!(trace.jobs[0].duration_secs, 59);
        assert_eq!(
            trace.skipped,
            Skipped {
                cancelled: 0,
                no_run_time: 3
            }
        );
    }

    #[test]
    fn malformed_lines_name_the_column_and_line() {
        let text = "submit,duration,cpu,mem,gpu,owner\n\
                    0,60,1.5.0,,,a\n\
                    -5,60,1,,,a\n\
                    0,60,1,4XB,,a\n\
                    0,60,1\n\
                    ,60,1,,,a\n\
                    0,soon,1,,,a\n\
                    0,60,0,,,a\n\
                    0,60,1,,-1,a\n\
                    7,60,1,,,a\n";
        let trace = parse(text);
        let got: Vec<(usize, &str)> = trace
            .malformed
            .iter()
            .map(|m| (m.line, m.message.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (2, "column cpu: \"1.5.0\" is not a number"),
                (3, "column submit: \"-5\" is negative"),
                (
                    4,
                    "column mem: unknown unit \"XB\" in \"4XB\" (known: m, k, M, G, T, P, Ki, \
                     Mi, Gi, Ti, Pi, each optionally followed by B)"
                ),
                (5, "expected 6 columns, as the header names, found 3"),
                (6, "column submit: is empty"),
                (7, "column duration: \"soon\" is not a number"),
                (8, "column cpu: must be more than 0"),
                (9, "column gpu: negative amount \"-1\""),
            ]
        );
        let ids: Vec<u64> = trace.jobs.iter().map(|job| job.id).collect();
        assert_eq!(ids, vec![10], "the good line after them is read");
    }

    #[test]
    fn strict_reading_stops_at_the_first_malformed_line() {
        let text = "submit,duration,cpu\n0,60,1\n0,60,two\n0,60,x\n";
        // Core's amount parser reads "two" as a number with the unit "two".
        let message = "column cpu: unknown unit \"two\" in \"two\" (known: m, k, M, G, T, P, Ki, \
                       Mi, Gi, Ti, Pi, each optionally followed by B)";
        let err = parse_csv(text, true).expect_err("line 3 is malformed");
        assert!(
            matches!(&err, TraceError::Malformed { line: 3, message: m } if m == message),
            "{err:?}"
        );
        let trace = parse(text);
        assert_eq!(
            trace.malformed.first(),
            Some(&Malformed {
                line: 3,
                message: message.into()
            })
        );
        assert_eq!(trace.malformed.len(), 2);
        assert_eq!(trace.jobs.len(), 1);
    }

    #[test]
    fn line_numbers_count_blank_and_quoted_lines() {
        let text = "submit,duration,cpu,owner\n\n0,60,1,\"two\nlines\"\n\n  \n5,60,x,c\n8,60,1,d";
        let trace = parse(text);
        assert_eq!(trace.jobs[0].id, 3);
        assert_eq!(trace.jobs[0].owner, "two\nlines");
        assert_eq!(trace.jobs[1].id, 8, "a last line without a line end");
        assert_eq!(trace.malformed.len(), 1, "{:?}", trace.malformed);
        assert_eq!(trace.malformed[0].line, 7);
    }

    #[test]
    fn line_numbers_count_crlf_and_lone_cr_line_ends() {
        let trace = parse("submit,duration,cpu\r\n0,1,1\r\n\r\n0,1,x\r\n0,1,1\r0,1,y\r");
        let ids: Vec<u64> = trace.jobs.iter().map(|job| job.id).collect();
        assert_eq!(ids, vec![2, 5]);
        let lines: Vec<usize> = trace.malformed.iter().map(|m| m.line).collect();
        assert_eq!(lines, vec![4, 6]);
    }

    #[test]
    fn jobs_are_sorted_by_submit_time_then_line() {
        let text = "submit,duration,cpu\n20,1,1\n10,1,1\n0,1,1\n10,1,1\n";
        let order: Vec<(u64, u64)> = parse(text)
            .jobs
            .iter()
            .map(|job| (job.submit_secs, job.id))
            .collect();
        assert_eq!(order, vec![(0, 4), (10, 3), (10, 5), (20, 2)]);
    }
}
