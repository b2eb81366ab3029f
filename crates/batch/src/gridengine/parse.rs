//! Reading what Grid Engine's tools print: `qstat -xml` (jobs waiting or running, and with `-s
//! z` the finished ones the master still remembers), `qhost -xml -q` (hosts and their queue
//! instances), and the `key value` records of `qacct -j` and `qconf -sconf`. Every reader is
//! total: XML it cannot read is a [`BatchError::Parse`] quoting it.

use std::collections::BTreeMap;

use crate::times::{ctime, iso as timestamp};
use crate::{BatchError, Job, JobState, Node, NodeState};

fn xml<'a>(command: &str, text: &'a str) -> Result<roxmltree::Document<'a>, BatchError> {
    roxmltree::Document::parse(text).map_err(|e| BatchError::parse(command, e.to_string(), text))
}

/// The text of `node`'s child element `name`, if any and not empty.
fn child<'a>(node: roxmltree::Node<'a, '_>, name: &str) -> Option<&'a str> {
    node.children()
        .find(|c| c.has_tag_name(name))
        .and_then(|c| c.text())
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// The jobs of `qstat -xml` (with `-s z`, the finished ones: their state comes from `qacct`,
/// see [`finished`]). A running array task is `JOB.TASK`; the tasks still waiting are `JOB`.
pub fn qstat(text: &str) -> Result<Vec<Job>, BatchError> {
    let doc = xml("qstat -xml", text)?;
    let mut jobs = Vec::new();
    for list in doc.descendants().filter(|n| n.has_tag_name("job_list")) {
        let Some(number) = child(list, "JB_job_number") else {
            return Err(BatchError::parse(
                "qstat -xml",
                "a job without a number",
                text,
            ));
        };
        let native = child(list, "state").unwrap_or_default();
        let tasks = child(list, "tasks");
        let single_task = tasks.filter(|t| t.bytes().all(|b| b.is_ascii_digit()));
        let id = match single_task {
            Some(task) => format!("{number}.{task}"),
            None => number.to_string(),
        };
        let time = |name| child(list, name).and_then(timestamp);
        jobs.push(Job {
            id,
            name: child(list, "JB_name").unwrap_or_default().to_string(),
            user: child(list, "JB_owner").unwrap_or_default().to_string(),
            state: state(native),
            native_state: native.to_string(),
            reason: native
                .contains('E')
                .then(|| "error state (clear it with qmod -cj)".to_string()),
            exit_code: None,
            queue: child(list, "queue_name").map(|q| q.split('@').next().unwrap_or(q).to_string()),
            nodes: child(list, "queue_name")
                .and_then(|q| q.split_once('@'))
                .map(|(_, host)| host.to_string()),
            submitted_at: time("JB_submission_time"),
            started_at: time("JAT_start_time"),
            ended_at: None,
            array_id: tasks.map(|_| number.to_string()),
            tasks: tasks.filter(|_| single_task.is_none()).map(str::to_string),
        });
    }
    Ok(jobs)
}

/// Grid Engine's state letters in the common set (`z`, finished, is resolved by `qacct`).
pub fn state(native: &str) -> JobState {
    let has = |c| native.contains(c);
    if has('d') {
        JobState::Completing
    } else if has('E') || has('h') {
        JobState::Held
    } else if has('s') || has('S') || has('T') {
        JobState::Suspended
    } else if has('r') || has('t') {
        JobState::Running
    } else if has('q') || has('w') {
        JobState::Queued
    } else {
        JobState::Unknown
    }
}

/// The jobs of `qacct -j`: one record each (an array's tasks each their own), separated by
/// lines of `=`, then (without a job id) a usage summary.
pub fn finished(text: &str) -> Result<Vec<Job>, BatchError> {
    let mut jobs = Vec::new();
    // `qacct -j` without an id ends with a summary of every job's usage.
    let records = text
        .split("\nTotal System Usage")
        .next()
        .unwrap_or_default();
    for record in records.split("\n=").map(|r| r.trim_start_matches('=')) {
        let fields: BTreeMap<&str, &str> = record
            .lines()
            .filter_map(|l| l.split_once(char::is_whitespace))
            .map(|(k, v)| (k, v.trim()))
            .collect();
        let Some(number) = fields.get("jobnumber") else {
            if fields.is_empty() {
                continue;
            }
            return Err(BatchError::parse(
                "qacct",
                "a record without jobnumber",
                record,
            ));
        };
        let id = match fields.get("taskid") {
            Some(task) if *task != "undefined" => format!("{number}.{task}"),
            _ => (*number).to_string(),
        };
        let number_of = |key: &str| -> Result<i32, BatchError> {
            let text = fields.get(key).copied().unwrap_or_default();
            // `100 : assumedly after job`
            let digits = text.split_whitespace().next().unwrap_or_default();
            digits
                .parse()
                .map_err(|_| BatchError::parse("qacct", format!("{key} is not a number"), record))
        };
        let (failed, exit) = (number_of("failed")?, number_of("exit_status")?);
        // qdel ends a running job with SIGKILL (137) and failure 100.
        let state = match (failed, exit) {
            (0, 0) => JobState::Done,
            (100, 137) => JobState::Cancelled,
            _ => JobState::Failed,
        };
        let native = format!("failed {failed}, exit_status {exit}");
        jobs.push(Job {
            array_id: fields
                .get("taskid")
                .filter(|t| **t != "undefined")
                .map(|_| (*number).to_string()),
            id,
            name: fields
                .get("jobname")
                .copied()
                .unwrap_or_default()
                .to_string(),
            user: fields.get("owner").copied().unwrap_or_default().to_string(),
            state,
            native_state: native,
            reason: fields
                .get("failed")
                .filter(|f| f.contains(':'))
                .map(|f| (*f).to_string()),
            exit_code: Some(exit),
            queue: fields.get("qname").map(|q| (*q).to_string()),
            nodes: fields.get("hostname").map(|h| (*h).to_string()),
            submitted_at: fields.get("qsub_time").and_then(|t| ctime(t)),
            started_at: fields.get("start_time").and_then(|t| ctime(t)),
            ended_at: fields.get("end_time").and_then(|t| ctime(t)),
            tasks: None,
        });
    }
    Ok(jobs)
}

/// The hosts of `qhost -xml -q` (not the `global` pseudo-host), with the state of their queue
/// instances: all disabled is drained (draining while slots are used), unreachable or in
/// error is down.
pub fn hosts(text: &str) -> Result<Vec<Node>, BatchError> {
    let doc = xml("qhost -xml", text)?;
    let mut nodes = Vec::new();
    for host in doc.descendants().filter(|n| n.has_tag_name("host")) {
        let name = host.attribute("name").unwrap_or_default();
        if name == "global" || name.is_empty() {
            continue;
        }
        let value = |name: &str| {
            host.children()
                .find(|c| c.has_tag_name("hostvalue") && c.attribute("name") == Some(name))
                .and_then(|c| c.text())
                .map(str::trim)
                .unwrap_or_default()
        };
        let mut queues = Vec::new();
        let (mut slots, mut used, mut states) = (0u32, 0u32, Vec::new());
        for queue in host.children().filter(|c| c.has_tag_name("queue")) {
            queues.push(queue.attribute("name").unwrap_or_default().to_string());
            let queue_value = |name: &str| {
                queue
                    .children()
                    .find(|c| c.attribute("name") == Some(name))
                    .and_then(|c| c.text())
                    .map(str::trim)
                    .unwrap_or_default()
            };
            slots += queue_value("slots").parse::<u32>().unwrap_or(0);
            used += queue_value("slots_used").parse::<u32>().unwrap_or(0);
            states.push(queue_value("state_string").to_string());
        }
        let all = |c: char| !states.is_empty() && states.iter().all(|s| s.contains(c));
        let any = |c: char| states.iter().any(|s| s.contains(c));
        let state = if any('u') || any('E') {
            NodeState::Down
        } else if all('d') {
            if used > 0 {
                NodeState::Draining
            } else {
                NodeState::Drained
            }
        } else if used == 0 {
            NodeState::Idle
        } else if used >= slots {
            NodeState::Allocated
        } else {
            NodeState::Mixed
        };
        nodes.push(Node {
            name: name.to_string(),
            state,
            native_state: states.join(","),
            cpus: value("num_proc").parse().unwrap_or(0),
            cpus_allocated: used,
            memory: memory(value("mem_total")),
            memory_allocated: memory(value("mem_used")),
            gpus: 0,
            queues,
            reason: None,
        });
    }
    Ok(nodes)
}

/// `23.5G`, `512.0M`, `0.0` as bytes (0 when unreadable or `-`).
fn memory(text: &str) -> u64 {
    let (number, scale) = match text.chars().last() {
        Some('K') => (&text[..text.len() - 1], 1u64 << 10),
        Some('M') => (&text[..text.len() - 1], 1 << 20),
        Some('G') => (&text[..text.len() - 1], 1 << 30),
        Some('T') => (&text[..text.len() - 1], 1 << 40),
        _ => (text, 1),
    };
    number
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n >= 0.0)
        .map_or(0, |n| (n * scale as f64) as u64)
}

/// `qconf -sconf` and `qconf -sq`: `key value` lines, a trailing `\` continuing a value.
pub fn settings(text: &str) -> BTreeMap<String, String> {
    let mut settings = BTreeMap::new();
    let mut last: Option<String> = None;
    for line in text.lines() {
        let continued = last.take();
        let (line, more) = match line.trim_end().strip_suffix('\\') {
            Some(l) => (l, true),
            None => (line.trim_end(), false),
        };
        let key = match continued {
            Some(key) => {
                let value: &mut String = settings.entry(key.clone()).or_default();
                value.push(' ');
                value.push_str(line.trim());
                key
            }
            None => {
                let Some((key, value)) = line.split_once(char::is_whitespace) else {
                    continue;
                };
                if key.starts_with('#') || key.is_empty() {
                    continue;
                }
                settings.insert(key.to_string(), value.trim().to_string());
                key.to_string()
            }
        };
        if more {
            last = Some(key);
        }
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    const QSTAT: &str = include_str!("../../tests/recorded/gridengine/qstat.xml");
    const QSTAT_Z: &str = include_str!("../../tests/recorded/gridengine/qstat-z.xml");
    const QACCT: &str = include_str!("../../tests/recorded/gridengine/qacct.txt");
    const QHOST: &str = include_str!("../../tests/recorded/gridengine/qhost.xml");

    #[test]
    fn recorded_outputs_read_whole() {
        let jobs = qstat(QSTAT).unwrap();
        let summary: Vec<(&str, JobState)> =
            jobs.iter().map(|j| (j.id.as_str(), j.state)).collect();
        assert_eq!(
            summary,
            [
                ("5", JobState::Running),
                ("7.1", JobState::Running),
                ("7.2", JobState::Running),
                ("6", JobState::Held),
                ("7", JobState::Queued)
            ]
        );
        assert_eq!(jobs[0].queue.as_deref(), Some("all.q"));
        assert_eq!(qstat(QSTAT_Z).unwrap().len(), 6);
        let done = finished(QACCT).unwrap_or_else(|e| panic!("{e}"));
        assert!(done
            .iter()
            .any(|j| j.id == "3.4" && j.state == JobState::Done));
        assert!(done.iter().all(|j| j.ended_at.is_some()), "{done:?}");
        let nodes = hosts(QHOST).unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].queues, ["all.q"]);
        assert_eq!(nodes[0].state, NodeState::Idle);
    }

    #[test]
    fn accounting_says_done_failed_or_cancelled() {
        let record = |failed: &str, exit: &str| {
            format!("==============\njobnumber 7\ntaskid undefined\nfailed {failed}\nexit_status {exit}\n")
        };
        let state = |f, e| finished(&record(f, e)).unwrap()[0].state;
        assert_eq!(state("0", "0"), JobState::Done);
        assert_eq!(state("0", "3"), JobState::Failed);
        assert_eq!(
            state("100 : assumedly after job", "137"),
            JobState::Cancelled
        );
        assert_eq!(finished(&record("0", "3")).unwrap()[0].exit_code, Some(3));
        assert!(finished(&record("x", "3")).is_err());
    }

    #[test]
    fn continued_settings_are_joined() {
        let s =
            settings("reporting_params accounting=true \\\n    flush_time=00:00:15\nmin_uid 0\n");
        assert_eq!(s["reporting_params"], "accounting=true flush_time=00:00:15");
        assert_eq!(s["min_uid"], "0");
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(memory("23.5G"), 25_232_932_864);
        assert_eq!(memory("512.0M"), 512 << 20);
        assert_eq!(memory("-"), 0);
    }

    fn read_all(text: &str) {
        let _ = qstat(text);
        let _ = finished(text);
        let _ = hosts(text);
        let _ = settings(text);
    }

    proptest::proptest! {
        #[test]
        fn cut_and_garbled_outputs_never_panic(cut in 0.0f64..1.0, junk in ".{0,40}") {
            for text in [QSTAT, QSTAT_Z, QACCT, QHOST] {
                let cut_text = crate::garble::cut(text, cut);
                read_all(cut_text);
                read_all(&crate::garble::insert(text, cut_text.len(), &junk));
            }
        }
    }
}
