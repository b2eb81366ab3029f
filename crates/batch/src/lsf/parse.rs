//! Reading what LSF's tools print: the JSON of `bjobs -o ... -json`, `bhosts -o ... -json` and
//! `bqueues -o ... -json` (LSF 10.1: `{"COMMAND": ..., "RECORDS": [{"FIELD": "text"}]}`, every
//! value a string, a job that is not found a record with `ERROR`), the `NAME = value` lines of
//! `bparams -a`, and the first line of `lsid`. Every reader is total: output it cannot read is a
//! [`BatchError::Parse`] quoting it.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{BatchError, Job, JobState, Node, NodeState, Queue};

/// The fields `bjobs -o` is asked for.
pub const BJOBS_FIELDS: &str = "jobid jobindex job_name user stat queue exec_host exit_code \
                                exit_reason pend_reason submit_time start_time finish_time";

/// The fields `bhosts -o` is asked for.
pub const BHOSTS_FIELDS: &str = "host_name status max njobs run ssusp ususp rsv";

/// The fields `bqueues -o` is asked for.
pub const BQUEUES_FIELDS: &str = "queue_name status";

#[derive(Deserialize)]
struct Records {
    #[serde(rename = "RECORDS")]
    records: Vec<BTreeMap<String, String>>,
}

/// The records of `command`'s JSON.
fn records(command: &str, text: &str) -> Result<Vec<BTreeMap<String, String>>, BatchError> {
    let parsed: Records =
        serde_json::from_str(text).map_err(|e| BatchError::parse(command, e.to_string(), text))?;
    Ok(parsed.records)
}

/// A record's field, absent when empty or `-`.
fn field<'a>(record: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    record
        .get(name)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty() && *v != "-")
}

/// What `bjobs -o BJOBS_FIELDS -json` says: the jobs, and the ids it did not find (records
/// with `ERROR`: "Job <9> is not found"). `now` (Unix seconds) dates LSF's times, which carry
/// no year.
pub fn jobs(text: &str, now: i64) -> Result<(Vec<Job>, Vec<String>), BatchError> {
    const COMMAND: &str = "bjobs -json";
    let mut jobs = Vec::new();
    let mut missing = Vec::new();
    for record in records(COMMAND, text)? {
        if record.contains_key("ERROR") {
            missing.push(field(&record, "JOBID").unwrap_or_default().to_string());
            continue;
        }
        let Some(number) = field(&record, "JOBID") else {
            return Err(BatchError::parse(COMMAND, "a job without JOBID", text));
        };
        let index = field(&record, "JOBINDEX")
            .and_then(|i| i.parse::<u64>().ok())
            .filter(|i| *i > 0);
        let id = match index {
            Some(index) => format!("{number}[{index}]"),
            None => number.to_string(),
        };
        if !crate::is_job_id(&id) {
            return Err(BatchError::parse(COMMAND, "not a job id", &id));
        }
        let native = field(&record, "STAT").unwrap_or_default().to_string();
        let exit_reason = field(&record, "EXIT_REASON");
        let state = state(&native, exit_reason);
        // An array's element is named `name[4]`: the array's name is the job's.
        let name = field(&record, "JOB_NAME").unwrap_or_default();
        let name = match index {
            Some(_) => name.rsplit_once('[').map_or(name, |(n, _)| n),
            None => name,
        };
        let exit_code = match state {
            JobState::Done => Some(0),
            s if s.is_final() => field(&record, "EXIT_CODE").and_then(|c| c.parse().ok()),
            _ => None,
        };
        let reason = match native.as_str() {
            "EXIT" => exit_reason,
            _ => field(&record, "PEND_REASON"),
        };
        let time = |name: &str| field(&record, name).and_then(|t| timestamp(t, now));
        jobs.push(Job {
            id,
            name: name.to_string(),
            user: field(&record, "USER").unwrap_or_default().to_string(),
            state,
            native_state: native,
            reason: reason.map(str::to_string),
            exit_code,
            queue: field(&record, "QUEUE").map(str::to_string),
            nodes: field(&record, "EXEC_HOST").map(hosts),
            submitted_at: time("SUBMIT_TIME"),
            started_at: time("START_TIME"),
            ended_at: time("FINISH_TIME").filter(|_| state.is_final()),
            array_id: index.map(|_| number.to_string()),
            tasks: None,
        });
    }
    Ok((jobs, missing))
}

/// LSF's job status in the common set; how an `EXIT` ended by its reason (`TERM_OWNER: job
/// killed by owner`, `TERM_RUNLIMIT: job killed after reaching LSF run time limit`).
pub fn state(native: &str, exit_reason: Option<&str>) -> JobState {
    match native {
        "PEND" | "PROV" | "WAIT" => JobState::Queued,
        "PSUSP" => JobState::Held,
        "RUN" => JobState::Running,
        "USUSP" | "SSUSP" => JobState::Suspended,
        "DONE" => JobState::Done,
        "EXIT" => {
            let reason = exit_reason.unwrap_or_default();
            let killed = [
                "TERM_OWNER",
                "TERM_ADMIN",
                "TERM_FORCE_OWNER",
                "TERM_FORCE_ADMIN",
            ];
            if killed.iter().any(|k| reason.starts_with(k)) {
                JobState::Cancelled
            } else if reason.starts_with("TERM_RUNLIMIT") {
                JobState::Timeout
            } else {
                JobState::Failed
            }
        }
        // Killed while its host was unreachable: LSF has not cleaned up yet.
        "ZOMBI" => JobState::Completing,
        _ => JobState::Unknown,
    }
}

/// `Dec  3 07:15` (with `L` or `E` after a finish time: actual or estimated) as Unix seconds:
/// LSF writes no year, so it is `now`'s, or the year before when that would be in the future.
/// Times are in UTC: the adaptor runs `bjobs` with `TZ=UTC`.
fn timestamp(text: &str, now: i64) -> Option<i64> {
    let words: Vec<&str> = text.split_whitespace().take(3).collect();
    let [month, day, clock] = words[..] else {
        return None;
    };
    let utc = jiff::tz::TimeZone::UTC;
    let year = jiff::Timestamp::from_second(now)
        .ok()?
        .to_zoned(utc.clone())
        .year();
    let at = |year: i16| -> Option<i64> {
        let text = format!("{year} {month} {day} {clock}");
        let time = jiff::civil::DateTime::strptime("%Y %b %d %H:%M", text).ok()?;
        Some(time.to_zoned(utc.clone()).ok()?.timestamp().as_second())
    };
    match at(year)? {
        // A day's leeway for clocks that differ.
        t if t > now + 86_400 => at(year - 1),
        t => Some(t),
    }
}

/// The hosts of `EXEC_HOST` (`hostA:hostA:hostB`, `4*hostA:2*hostB`), once each.
fn hosts(exec_host: &str) -> String {
    let mut names: Vec<&str> = Vec::new();
    for part in exec_host.split(':') {
        let name = part.rsplit('*').next().unwrap_or_default().trim();
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names.join(",")
}

/// The hosts of `bhosts -o BHOSTS_FIELDS -json`: slots (`MAX`, `-` when unlimited) and the
/// slots jobs use (`NJOBS`); `closed_Adm` (`badmin hclose`) is drained.
pub fn nodes(text: &str) -> Result<Vec<Node>, BatchError> {
    const COMMAND: &str = "bhosts -json";
    let mut list = Vec::new();
    for record in records(COMMAND, text)? {
        let Some(name) = field(&record, "HOST_NAME") else {
            return Err(BatchError::parse(COMMAND, "a host without HOST_NAME", text));
        };
        let count = |key: &str| {
            field(&record, key)
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0)
        };
        let (slots, used) = (count("MAX"), count("NJOBS"));
        let native = field(&record, "STATUS").unwrap_or_default();
        let by_use = match (used, slots) {
            (0, _) => NodeState::Idle,
            (u, s) if s > 0 && u >= s => NodeState::Allocated,
            _ => NodeState::Mixed,
        };
        let state = match native {
            "ok" => by_use,
            "closed_Full" | "closed_Excl" => NodeState::Allocated,
            "closed_Adm" | "closed_Lock" if used > 0 => NodeState::Draining,
            "closed_Adm" | "closed_Lock" => NodeState::Drained,
            "unavail" | "unreach" | "closed_LIM" => NodeState::Down,
            // Closed for a while (load, dispatch window): as busy as its jobs make it.
            _ if used > 0 => by_use,
            _ => NodeState::Unknown,
        };
        list.push(Node {
            name: name.to_string(),
            state,
            native_state: native.to_string(),
            cpus: slots,
            cpus_allocated: used,
            memory: 0,
            memory_allocated: 0,
            gpus: 0,
            queues: Vec::new(),
            reason: None,
        });
    }
    Ok(list)
}

/// The queues of `bqueues -o BQUEUES_FIELDS -json`: `Open` takes submits, `Active` dispatches.
pub fn queues(text: &str, default: &[&str]) -> Result<Vec<Queue>, BatchError> {
    const COMMAND: &str = "bqueues -json";
    let mut list = Vec::new();
    for record in records(COMMAND, text)? {
        let Some(name) = field(&record, "QUEUE_NAME") else {
            return Err(BatchError::parse(
                COMMAND,
                "a queue without QUEUE_NAME",
                text,
            ));
        };
        let status = field(&record, "STATUS").unwrap_or_default();
        let (open, active) = status.split_once(':').unwrap_or((status, ""));
        let state = match (open, active) {
            ("Open", "Active") => "up",
            ("Closed", "Active") => "drain",
            ("Closed", _) => "down",
            ("Open", _) => "inactive",
            _ => "unknown",
        };
        list.push(Queue {
            name: name.to_string(),
            state: state.into(),
            default: default.contains(&name),
            max_walltime: None,
            nodes: String::new(),
        });
    }
    Ok(list)
}

/// `bparams -a`: `NAME = value` lines.
pub fn params(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
        .collect()
}

/// The version `lsid` opens with: `IBM Spectrum LSF Standard 10.1.0.13, Apr 15 2022`.
pub fn version(lsid: &str) -> Option<String> {
    lsid.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BJOBS: &str = include_str!("../../tests/recorded/lsf/bjobs.json");
    const BJOBS_MISSING: &str = include_str!("../../tests/recorded/lsf/bjobs-missing.json");
    const BHOSTS: &str = include_str!("../../tests/recorded/lsf/bhosts.json");
    const BQUEUES: &str = include_str!("../../tests/recorded/lsf/bqueues.json");
    const BPARAMS: &str = include_str!("../../tests/recorded/lsf/bparams.txt");
    const LSID: &str = include_str!("../../tests/recorded/lsf/lsid.txt");

    /// 2026-12-03T08:00:00Z, when the outputs were "recorded".
    const NOW: i64 = 1_796_284_800;

    #[test]
    fn recorded_jobs_read_whole() {
        let (jobs, missing) = jobs(BJOBS, NOW).unwrap();
        assert!(missing.is_empty());
        let summary: Vec<(&str, JobState, Option<i32>)> = jobs
            .iter()
            .map(|j| (j.id.as_str(), j.state, j.exit_code))
            .collect();
        assert_eq!(
            summary,
            [
                ("300", JobState::Done, Some(0)),
                ("301", JobState::Failed, Some(3)),
                ("302", JobState::Cancelled, Some(130)),
                ("303", JobState::Timeout, Some(140)),
                ("304", JobState::Running, None),
                ("305", JobState::Held, None),
                ("306", JobState::Queued, None),
                ("307[1]", JobState::Done, Some(0)),
                ("307[2]", JobState::Running, None),
                ("307[3]", JobState::Queued, None),
                ("307[4]", JobState::Queued, None),
            ]
        );
        let running = &jobs[4];
        assert_eq!(running.user, "alice");
        assert_eq!(running.queue.as_deref(), Some("normal"));
        assert_eq!(running.nodes.as_deref(), Some("hostA,hostB"));
        assert_eq!(running.submitted_at, Some(1_796_282_100));
        assert_eq!(running.started_at, Some(1_796_282_160));
        assert_eq!(running.ended_at, None);
        assert_eq!(jobs[1].ended_at, Some(1_796_282_220));
        assert_eq!(
            jobs[1].reason.as_deref(),
            Some("TERM_EXIT: job exited with non-zero exit code")
        );
        assert_eq!(
            jobs[5].reason.as_deref(),
            Some("The job was suspended by the user while pending;")
        );
        assert_eq!(jobs[7].name, "sweep");
        assert_eq!(jobs[7].array_id.as_deref(), Some("307"));
        let (jobs, missing) = super::jobs(BJOBS_MISSING, NOW).unwrap();
        assert!(jobs.is_empty());
        assert_eq!(missing, ["999"]);
    }

    #[test]
    fn times_without_a_year_are_in_the_past_year() {
        // December, read in January: last year's.
        let january = 1_798_761_600; // 2027-01-01T00:00:00Z
        assert_eq!(timestamp("Dec  3 07:15", january), Some(1_796_282_100));
        assert_eq!(timestamp("Dec  3 07:15 L", NOW), Some(1_796_282_100));
        assert_eq!(timestamp("soon", NOW), None);
        assert_eq!(hosts("4*hostA:2*hostB:hostA"), "hostA,hostB");
    }

    #[test]
    fn recorded_hosts_queues_and_params_read_whole() {
        let nodes = nodes(BHOSTS).unwrap();
        let states: Vec<(&str, NodeState)> =
            nodes.iter().map(|n| (n.name.as_str(), n.state)).collect();
        assert_eq!(
            states,
            [
                ("hostA", NodeState::Mixed),
                ("hostB", NodeState::Allocated),
                ("hostC", NodeState::Drained),
                ("hostD", NodeState::Down)
            ]
        );
        assert_eq!((nodes[0].cpus, nodes[0].cpus_allocated), (16, 6));
        let settings = params(BPARAMS);
        assert_eq!(settings["DEFAULT_QUEUE"], "normal");
        assert_eq!(settings["CLEAN_PERIOD"], "3600");
        let default: Vec<&str> = settings["DEFAULT_QUEUE"].split_whitespace().collect();
        let queues = queues(BQUEUES, &default).unwrap();
        let summary: Vec<(&str, &str, bool)> = queues
            .iter()
            .map(|q| (q.name.as_str(), q.state.as_str(), q.default))
            .collect();
        assert_eq!(
            summary,
            [
                ("normal", "up", true),
                ("short", "drain", false),
                ("night", "inactive", false),
                ("old", "down", false)
            ]
        );
        assert_eq!(
            version(LSID).as_deref(),
            Some("IBM Spectrum LSF Standard 10.1.0.13, Apr 15 2022")
        );
    }

    #[test]
    fn exit_reasons_say_how_a_job_ended() {
        assert_eq!(
            state("EXIT", Some("TERM_OWNER: job killed by owner")),
            JobState::Cancelled
        );
        assert_eq!(
            state(
                "EXIT",
                Some("TERM_RUNLIMIT: job killed after reaching LSF run time limit")
            ),
            JobState::Timeout
        );
        assert_eq!(state("EXIT", None), JobState::Failed);
        assert_eq!(state("ZOMBI", None), JobState::Completing);
        assert_eq!(state("SOMETHING", None), JobState::Unknown);
    }

    fn read_all(text: &str) {
        let _ = jobs(text, NOW);
        let _ = nodes(text);
        let _ = queues(text, &["normal"]);
        let _ = params(text);
        let _ = version(text);
    }

    const ALL: [&str; 6] = [BJOBS, BJOBS_MISSING, BHOSTS, BQUEUES, BPARAMS, LSID];

    /// The JSON outputs with their readers: any of them cut short is a parse error.
    type Reader = fn(&str) -> Result<usize, BatchError>;
    const STRUCTURED: [(&str, Reader); 3] = [
        (BJOBS, |t| jobs(t, NOW).map(|(j, _)| j.len())),
        (BHOSTS, |t| nodes(t).map(|n| n.len())),
        (BQUEUES, |t| queues(t, &[]).map(|q| q.len())),
    ];

    proptest::proptest! {
        #[test]
        fn cut_outputs_are_parse_errors(cut in 0.0f64..1.0) {
            for text in ALL {
                let cut_text = crate::garble::cut(text, cut);
                read_all(cut_text);
            }
            for (text, read) in STRUCTURED {
                let cut_text = crate::garble::cut(text.trim_end(), cut);
                let got = read(cut_text);
                proptest::prop_assert!(
                    matches!(got, Err(BatchError::Parse { .. })),
                    "{:?} read from {:?}", got, cut_text
                );
            }
        }

        #[test]
        fn garbled_outputs_never_panic(at in 0usize..20_000, junk in ".{0,40}") {
            for text in ALL {
                read_all(&crate::garble::insert(text, at, &junk));
            }
        }

        #[test]
        fn any_text_never_panics(text in "\\PC{0,300}") {
            read_all(&text);
        }
    }
}
