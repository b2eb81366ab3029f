//! The Standard Workload Format (SWF) of the Parallel Workloads Archive: `; Key: value` header
//! lines, then one job per line as 18 whitespace-separated numbers, -1 where unknown.
//!
//! A job asks for `cpu` = its allocated processors (what it really held), else its requested
//! ones, and `mem` = its requested memory per processor times that count, when the log has it.

use corral_core::Quantity;

use super::{
    parse_rounded_down, request, Collector, LineOutcome, SwfHeader, Trace, TraceError, TraceJob,
};

/// The fields of a job line, in order, as the archive's definition names them.
const FIELD_NAMES: [&str; 18] = [
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable",
    "queue",
    "partition",
    "preceding job",
    "think time",
];

// 1-based field numbers, as the definition (and the error messages) count them.
const JOB_NUMBER: usize = 1;
const SUBMIT_TIME: usize = 2;
const WAIT_TIME: usize = 3;
const RUN_TIME: usize = 4;
const ALLOCATED_PROCESSORS: usize = 5;
const REQUESTED_PROCESSORS: usize = 8;
const REQUESTED_MEMORY_KB_PER_PROCESSOR: usize = 10;
const STATUS: usize = 11;
const USER_ID: usize = 12;

/// Status 5: the job was cancelled (before or after it started).
const STATUS_CANCELLED: i64 = 5;

/// Reads an SWF log. Reading strictly, the first malformed line is the error; otherwise such
/// lines are collected in [`Trace::malformed`] and the rest is read.
pub fn parse_swf(text: &str, strict: bool) -> Result<Trace, TraceError> {
    let mut header = SwfHeader::default();
    let mut collector = Collector::new(strict);
    let mut extra_fields = 0;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim();
        if content.is_empty() {
            continue;
        }
        if let Some(comment) = content.strip_prefix(';') {
            if let Err(message) = read_header_line(comment, &mut header) {
                collector.malformed(line, message)?;
            }
            continue;
        }
        if content.split_whitespace().nth(FIELD_NAMES.len()).is_some() {
            extra_fields += 1;
        }
        collector.record(line, read_job_line(content))?;
    }
    let mut trace = collector.finish(header);
    trace.extra_fields = extra_fields;
    Ok(trace)
}

/// Takes a `Key: value` comment into the header. Comments that are not of that form (a lone
/// `;`, free text) say nothing the simulator needs and are passed over.
fn read_header_line(comment: &str, header: &mut SwfHeader) -> Result<(), String> {
    let Some((key, value)) = comment.split_once(':') else {
        return Ok(());
    };
    let (key, value) = (key.trim(), value.trim());
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Ok(());
    }
    match key {
        "MaxNodes" => header.max_nodes = header_count(key, value)?,
        "MaxProcs" => header.max_procs = header_count(key, value)?,
        _ => {
            header
                .fields
                .entry(key.to_string())
                .and_modify(|values| {
                    values.push('\n');
                    values.push_str(value);
                })
                .or_insert_with(|| value.to_string());
        }
    }
    Ok(())
}

/// A count in the header; negative (-1) is unknown, as in job lines.
fn header_count(key: &str, value: &str) -> Result<Option<u64>, String> {
    let count = parse_rounded_down(value).map_err(|e| format!("header {key}: {value:?} {e}"))?;
    Ok(u64::try_from(count).ok())
}

/// Reads one job line into a job, or says why it is skipped or cannot be read.
fn read_job_line(content: &str) -> Result<LineOutcome, String> {
    // Fields past the 18th (some logs add their own) are not read.
    let texts: Vec<&str> = content.split_whitespace().take(FIELD_NAMES.len()).collect();
    if texts.len() != FIELD_NAMES.len() {
        return Err(format!(
            "expected {} fields, found {}",
            FIELD_NAMES.len(),
            texts.len()
        ));
    }
    let mut values = [0i64; FIELD_NAMES.len()];
    for (index, (value, text)) in values.iter_mut().zip(&texts).enumerate() {
        *value = parse_rounded_down(text)
            .map_err(|e| format!("{}: {text:?} {e}", describe(index + 1)))?;
    }
    let field = |number: usize| values[number - 1];

    let id = u64::try_from(field(JOB_NUMBER))
        .map_err(|_| format!("{}: {:?} is negative", describe(JOB_NUMBER), texts[0]))?;
    let submit_secs = u64::try_from(field(SUBMIT_TIME)).map_err(|_| {
        format!(
            "{}: {:?} is unknown, so the job cannot be replayed",
            describe(SUBMIT_TIME),
            texts[SUBMIT_TIME - 1]
        )
    })?;

    // Jobs that never ran are counted, not replayed; they need no processor count.
    let run_time = field(RUN_TIME);
    if run_time <= 0 {
        return Ok(if field(STATUS) == STATUS_CANCELLED {
            LineOutcome::Cancelled
        } else {
            LineOutcome::NoRunTime
        });
    }

    let processors = [ALLOCATED_PROCESSORS, REQUESTED_PROCESSORS]
        .into_iter()
        .map(field)
        .find(|&count| count > 0)
        .ok_or_else(|| {
            format!(
                "no processor count: {} and {} are both unknown or 0",
                describe(ALLOCATED_PROCESSORS),
                describe(REQUESTED_PROCESSORS)
            )
        })?
        .unsigned_abs();
    let cpu = Quantity::from_units(processors)
        .ok_or_else(|| format!("{processors} processors is too large an amount"))?;

    let memory_kb_per_processor = field(REQUESTED_MEMORY_KB_PER_PROCESSOR);
    let mem = if memory_kb_per_processor > 0 {
        let bytes = memory_kb_per_processor
            .unsigned_abs()
            .checked_mul(processors)
            .and_then(|kb| kb.checked_mul(1024))
            .and_then(Quantity::from_units)
            .ok_or_else(|| {
                format!(
                    "{}: {memory_kb_per_processor} KB per processor times {processors} \
                     processors is too large an amount",
                    describe(REQUESTED_MEMORY_KB_PER_PROCESSOR)
                )
            })?;
        Some(bytes)
    } else {
        None
    };

    let user = field(USER_ID);
    let owner = if user >= 0 {
        format!("u{user}")
    } else {
        "unknown".to_string()
    };

    Ok(LineOutcome::Job(TraceJob {
        id,
        submit_secs,
        duration_secs: run_time.unsigned_abs(),
        request: request([("cpu", Some(cpu)), ("mem", mem), ("gpu", None)]),
        owner,
        recorded_wait_secs: u64::try_from(field(WAIT_TIME)).ok(),
    }))
}

/// `field 4 (run time)`: how messages name a field.
fn describe(number: usize) -> String {
    format!("field {number} ({})", FIELD_NAMES[number - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Malformed, Skipped};

    /// A job line with the given fields set and every other field -1 (unknown).
    fn job_line(set: &[(usize, &str)]) -> String {
        let mut fields = vec!["-1"; FIELD_NAMES.len()];
        for &(number, text) in set {
            fields[number - 1] = text;
        }
        fields.join(" ")
    }

    /// An ordinary completed job: `id`, submitted at `submit`, ran `run` s on `procs`.
    fn simple(id: &str, submit: &str, run: &str, procs: &str) -> String {
        job_line(&[
            (JOB_NUMBER, id),
            (SUBMIT_TIME, submit),
            (RUN_TIME, run),
            (ALLOCATED_PROCESSORS, procs),
            (STATUS, "1"),
        ])
    }

    fn parse(text: &str) -> Trace {
        parse_swf(text, false).expect("non-strict reading collects bad lines")
    }

    #[test]
    fn header_keys_are_read_and_trimmed() {
        let text = "; Version: 2.2\n\
                    ;   Computer:   Linux cluster (Seth)  \n\
                    ; MaxNodes: 120\n\
                    ;MaxProcs:240\n\
                    ; Partition:  1 DEFAULT \n\
                    ; Partition:  2 ALL\n\
                    ; Information: http://example.org/log\n\
                    ; a free remark: not a key\n\
                    ;\n";
        let trace = parse(text);
        assert_eq!(trace.header.max_nodes, Some(120));
        assert_eq!(trace.header.max_procs, Some(240));
        let fields = &trace.header.fields;
        assert_eq!(fields["Version"], "2.2");
        assert_eq!(fields["Computer"], "Linux cluster (Seth)");
        assert_eq!(fields["Partition"], "1 DEFAULT\n2 ALL");
        assert_eq!(fields["Information"], "http://example.org/log");
        assert!(!fields.contains_key("MaxNodes"), "kept in its own field");
        assert_eq!(fields.len(), 4, "{fields:?}");
        assert!(trace.jobs.is_empty() && trace.malformed.is_empty());
    }

    #[test]
    fn unknown_header_counts_are_none_and_bad_ones_malformed() {
        let trace = parse("; MaxNodes: -1\n; MaxProcs: many\n");
        assert_eq!(trace.header.max_nodes, None);
        assert_eq!(trace.header.max_procs, None);
        assert_eq!(
            trace.malformed,
            vec![Malformed {
                line: 2,
                message: "header MaxProcs: \"many\" is not a number".into()
            }]
        );
    }

    #[test]
    fn a_job_line_becomes_a_job() {
        let line = job_line(&[
            (JOB_NUMBER, "7"),
            (SUBMIT_TIME, "100"),
            (WAIT_TIME, "30"),
            (RUN_TIME, "3600"),
            (ALLOCATED_PROCESSORS, "4"),
            (REQUESTED_PROCESSORS, "4"),
            (STATUS, "1"),
            (USER_ID, "12"),
        ]);
        let trace = parse(&line);
        assert_eq!(
            trace.jobs,
            vec![TraceJob {
                id: 7,
                submit_secs: 100,
                duration_secs: 3600,
                request: "cpu=4".parse().expect("valid slots"),
                owner: "u12".into(),
                recorded_wait_secs: Some(30),
            }]
        );
        assert_eq!(trace.skipped, Skipped::default());
        assert_eq!(trace.header, SwfHeader::default());
    }

    #[test]
    fn unknown_fields_are_left_out() {
        // Wait, user and memory all -1: no recorded wait, no owner, no mem slot.
        let trace = parse(&simple("1", "0", "60", "2"));
        let job = &trace.jobs[0];
        assert_eq!(job.recorded_wait_secs, None);
        assert_eq!(job.owner, "unknown");
        assert_eq!(job.request.to_string(), "cpu=2");
        // User 0 is a user, and a wait of 0 is a recorded wait.
        let line = job_line(&[
            (JOB_NUMBER, "1"),
            (SUBMIT_TIME, "0"),
            (WAIT_TIME, "0"),
            (RUN_TIME, "60"),
            (ALLOCATED_PROCESSORS, "2"),
            (USER_ID, "0"),
        ]);
        let job = &parse(&line).jobs[0];
        assert_eq!(job.recorded_wait_secs, Some(0));
        assert_eq!(job.owner, "u0");
    }

    #[test]
    fn jobs_that_never_ran_are_counted_by_reason() {
        let line = |id: &str, run: &str, status: &str| {
            job_line(&[
                (JOB_NUMBER, id),
                (SUBMIT_TIME, "10"),
                (RUN_TIME, run),
                (ALLOCATED_PROCESSORS, "1"),
                (STATUS, status),
            ])
        };
        let text = [
            line("1", "-1", "5"),  // cancelled before it started
            line("2", "0", "5"),   // likewise
            line("3", "-1", "0"),  // failed without a run time
            line("4", "0", "1"),   // completed in no time
            line("5", "0.4", "1"), // rounds down to no time
            line("6", "-1", "-1"), // status unknown too
            line("7", "50", "5"),  // cancelled after it ran: replayed
        ]
        .join("\n");
        let trace = parse(&text);
        assert_eq!(
            trace.skipped,
            Skipped {
                cancelled: 2,
                no_run_time: 4
            }
        );
        let ids: Vec<u64> = trace.jobs.iter().map(|job| job.id).collect();
        assert_eq!(ids, vec![7]);
        assert_eq!(trace.jobs[0].duration_secs, 50);
    }

    #[test]
    fn allocated_processors_win_over_requested_ones() {
        let line = |id: &str, allocated: &str, requested: &str| {
            job_line(&[
                (JOB_NUMBER, id),
                (SUBMIT_TIME, "0"),
                (RUN_TIME, "60"),
                (ALLOCATED_PROCESSORS, allocated),
                (REQUESTED_PROCESSORS, requested),
            ])
        };
        let text = [
            line("1", "18", "16"),
            line("2", "-1", "8"),
            line("3", "0", "3"),
            line("4", "-1", "-1"),
            line("5", "0", "0"),
        ]
        .join("\n");
        let trace = parse(&text);
        let cpus: Vec<String> = trace
            .jobs
            .iter()
            .map(|job| job.request.to_string())
            .collect();
        assert_eq!(cpus, vec!["cpu=18", "cpu=8", "cpu=3"]);
        let message = "no processor count: field 5 (allocated processors) and field 8 \
                       (requested processors) are both unknown or 0";
        assert_eq!(
            trace.malformed,
            vec![
                Malformed {
                    line: 4,
                    message: message.into()
                },
                Malformed {
                    line: 5,
                    message: message.into()
                },
            ]
        );
    }

    #[test]
    fn requested_memory_is_per_processor() {
        let line = |procs: &str, kb: &str| {
            job_line(&[
                (JOB_NUMBER, "1"),
                (SUBMIT_TIME, "0"),
                (RUN_TIME, "60"),
                (ALLOCATED_PROCESSORS, procs),
                (REQUESTED_MEMORY_KB_PER_PROCESSOR, kb),
            ])
        };
        let request = |text: &str| parse(text).jobs[0].request.to_string();
        assert_eq!(request(&line("4", "1024")), "cpu=4,mem=4MiB");
        assert_eq!(request(&line("16", "819200")), "cpu=16,mem=12800MiB");
        assert_eq!(request(&line("2", "1")), "cpu=2,mem=2KiB");
        assert_eq!(request(&line("2", "0")), "cpu=2");
        assert_eq!(request(&line("2", "-1")), "cpu=2");
        let too_much = parse(&line("2", "9223372036854775807"));
        assert!(too_much.jobs.is_empty());
        assert!(
            too_much.malformed[0]
                .message
                .starts_with("field 10 (requested memory): 9223372036854775807 KB per processor"),
            "{:?}",
            too_much.malformed
        );
    }

    #[test]
    fn fractions_are_accepted_and_times_rounded_down() {
        let line = job_line(&[
            (JOB_NUMBER, "12"),
            (SUBMIT_TIME, "342343.9"),
            (WAIT_TIME, "5.5"),
            (RUN_TIME, "553.99"),
            (ALLOCATED_PROCESSORS, "40"),
            (6, "552.21"),
        ]);
        let trace = parse_swf(&line, true).expect("fractions are numbers");
        let job = &trace.jobs[0];
        assert_eq!(job.submit_secs, 342343);
        assert_eq!(job.recorded_wait_secs, Some(5));
        assert_eq!(job.duration_secs, 553);
    }

    #[test]
    fn malformed_lines_are_collected_with_their_line_numbers() {
        let text = format!(
            "; MaxProcs: 8\n\n{}\n1 2 3\n{}\n{}\n{}\n",
            simple("1", "0", "60", "2"),
            simple("2", "5", "abc", "2"),
            simple("3", "-1", "60", "2"),
            simple("4", "9", "60", "2"),
        );
        let trace = parse(&text);
        assert_eq!(
            trace.malformed,
            vec![
                Malformed {
                    line: 4,
                    message: "expected 18 fields, found 3".into()
                },
                Malformed {
                    line: 5,
                    message: "field 4 (run time): \"abc\" is not a number".into()
                },
                Malformed {
                    line: 6,
                    message: "field 2 (submit time): \"-1\" is unknown, so the job cannot be \
                              replayed"
                        .into()
                },
            ]
        );
        let ids: Vec<u64> = trace.jobs.iter().map(|job| job.id).collect();
        assert_eq!(ids, vec![1, 4], "the good lines around them are read");
        assert_eq!(trace.header.max_procs, Some(8));
    }

    #[test]
    fn strict_reading_stops_at_the_first_malformed_line() {
        let text = format!(
            "{}\n{}\n1 2 3\n",
            simple("1", "0", "60", "2"),
            simple("2", "0", "60", "x2"),
        );
        let err = parse_swf(&text, true).expect_err("line 2 is malformed");
        assert!(
            matches!(
                &err,
                TraceError::Malformed { line: 2, message }
                    if message == "field 5 (allocated processors): \"x2\" is not a number"
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "line 2: field 5 (allocated processors): \"x2\" is not a number"
        );
        let err = parse_swf("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17", true)
            .expect_err("one field too few");
        assert_eq!(err.to_string(), "line 1: expected 18 fields, found 17");
    }

    #[test]
    fn fields_past_the_eighteenth_are_not_read_and_are_counted() {
        let line = |extra: &str| format!("{} {extra}", simple("1", "0", "60", "2"));
        let text = [line("7 8"), line(""), line("9")].join("\n");
        let trace = parse_swf(&text, true).unwrap();
        assert_eq!(trace.jobs.len(), 3);
        assert_eq!(trace.extra_fields, 2);
        assert_eq!(trace.jobs[0].request, trace.jobs[1].request);
    }

    #[test]
    fn jobs_are_sorted_by_submit_time_then_id() {
        let text = [
            simple("3", "20", "60", "1"),
            simple("2", "10", "60", "1"),
            simple("9", "0", "60", "1"),
            simple("1", "10", "60", "1"),
        ]
        .join("\n");
        let order: Vec<(u64, u64)> = parse(&text)
            .jobs
            .iter()
            .map(|job| (job.submit_secs, job.id))
            .collect();
        assert_eq!(order, vec![(0, 9), (10, 1), (10, 2), (20, 3)]);
    }

    #[test]
    fn crlf_blank_and_indented_lines_are_read() {
        let text = format!(
            "; MaxNodes: 2\r\n   \r\n  {}  \r\n\t{}\r\n",
            simple("1", "0", "60", "1"),
            simple("2", "1", "60", "1"),
        );
        let trace = parse_swf(&text, true).expect("well formed");
        assert_eq!(trace.header.max_nodes, Some(2));
        assert_eq!(trace.jobs.len(), 2);
    }
}
