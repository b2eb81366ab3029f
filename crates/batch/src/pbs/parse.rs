//! Reading what PBS's tools print: PBS Pro's `qstat -f -F json` and `pbsnodes -a -F json`
//! (its JSON: attribute names as `qstat -f` prints them, values that look like numbers as
//! numbers, times as `ctime` strings), Torque's `qstat -f -x` and `pbsnodes -x` (XML, times in
//! Unix seconds), and the `set server|queue` lines of `qmgr -c 'print server'`. Every reader is
//! total: output it cannot read is a [`BatchError::Parse`] quoting it.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{BatchError, Job, JobState, Node, NodeState, Queue};

use super::Flavor;

/// One job's attributes, whichever tool printed them.
#[derive(Default)]
struct Attributes(BTreeMap<String, String>);

impl Attributes {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    fn number(&self, name: &str) -> Option<i64> {
        self.get(name)?.parse().ok()
    }

    /// A time: Unix seconds (Torque) or a `ctime` string (PBS Pro, in UTC: the adaptor runs
    /// `qstat` with `TZ=UTC`).
    fn time(&self, name: &str) -> Option<i64> {
        let text = self.get(name)?;
        match text.parse::<i64>() {
            Ok(secs) => Some(secs).filter(|s| *s > 0),
            Err(_) => crate::times::ctime(text),
        }
    }
}

/// A JSON value as the text `qstat -f` would print.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The jobs of `qstat -f -F json` (PBS Pro), subjobs (`-t`) and finished jobs (`-x`) too.
pub fn pbspro_jobs(text_: &str) -> Result<Vec<Job>, BatchError> {
    const COMMAND: &str = "qstat -f -F json";
    let root: Value = serde_json::from_str(text_)
        .map_err(|e| BatchError::parse(COMMAND, e.to_string(), text_))?;
    let Some(root) = root.as_object() else {
        return Err(BatchError::parse(COMMAND, "not a JSON object", text_));
    };
    // No jobs, no "Jobs".
    let Some(jobs) = root.get("Jobs") else {
        return Ok(Vec::new());
    };
    let Some(jobs) = jobs.as_object() else {
        return Err(BatchError::parse(COMMAND, "Jobs is not an object", text_));
    };
    let mut list = Vec::new();
    for (id, attributes) in jobs {
        let Some(attributes) = attributes.as_object() else {
            return Err(BatchError::parse(
                COMMAND,
                format!("job {id} is not an object"),
                text_,
            ));
        };
        let flat = attributes
            .iter()
            .filter(|(_, v)| !v.is_object())
            .map(|(k, v)| (k.clone(), text(v)))
            .collect();
        list.push(job(id, &Attributes(flat), Flavor::PbsPro)?);
    }
    Ok(list)
}

/// The jobs of `qstat -f -x` (Torque), each `<Job>` of `<Data>`.
pub fn torque_jobs(text_: &str) -> Result<Vec<Job>, BatchError> {
    const COMMAND: &str = "qstat -f -x";
    let doc = roxmltree::Document::parse(text_)
        .map_err(|e| BatchError::parse(COMMAND, e.to_string(), text_))?;
    if !doc.root_element().has_tag_name("Data") {
        return Err(BatchError::parse(COMMAND, "no <Data>", text_));
    }
    let mut list = Vec::new();
    for element in doc
        .root_element()
        .children()
        .filter(|n| n.has_tag_name("Job"))
    {
        let flat: BTreeMap<String, String> = element
            .children()
            .filter(|c| c.is_element())
            .filter_map(|c| Some((c.tag_name().name().to_string(), c.text()?.to_string())))
            .collect();
        let attributes = Attributes(flat);
        let Some(id) = attributes.get("Job_Id").map(str::to_string) else {
            return Err(BatchError::parse(COMMAND, "a job without Job_Id", text_));
        };
        list.push(job(&id, &attributes, Flavor::Torque)?);
    }
    Ok(list)
}

fn job(id: &str, a: &Attributes, flavor: Flavor) -> Result<Job, BatchError> {
    if !crate::is_job_id(id) {
        return Err(BatchError::parse("qstat", "not a job id", id));
    }
    let native = a.get("job_state").unwrap_or_default().to_string();
    let started_at = a.time("stime").or_else(|| a.time("start_time"));
    let state = state(&native, a, started_at.is_some(), flavor);
    let parent = id.contains("[]");
    // A subjob names its array (PBS Pro); Torque's are known by their id, `12[3].server`.
    let array_id = a.get("array_id").map(str::to_string).or_else(|| {
        let (head, rest) = id.split_once('[')?;
        let (_, tail) = rest.split_once(']')?;
        (!parent).then(|| format!("{head}[]{tail}"))
    });
    Ok(Job {
        id: id.to_string(),
        name: a.get("Job_Name").unwrap_or_default().to_string(),
        // `alice@login1`
        user: a
            .get("Job_Owner")
            .and_then(|o| o.split('@').next())
            .unwrap_or_default()
            .to_string(),
        state,
        native_state: native,
        reason: a.get("comment").map(str::to_string),
        exit_code: state
            .is_final()
            .then(|| a.number("Exit_status").or_else(|| a.number("exit_status")))
            .flatten()
            .and_then(exit_code),
        queue: a.get("queue").map(str::to_string),
        nodes: a.get("exec_host").map(hosts),
        submitted_at: a.time("ctime"),
        started_at,
        ended_at: a.time("obittime").or_else(|| a.time("comp_time")),
        array_id,
        tasks: a
            .get("array_indices_remaining")
            .filter(|t| parent && *t != "-")
            .map(str::to_string),
    })
}

/// PBS's state letter in the common set; a finished job's by how it ended.
fn state(native: &str, a: &Attributes, started: bool, flavor: Flavor) -> JobState {
    match native {
        "Q" | "W" | "T" => JobState::Queued,
        "H" => JobState::Held,
        "R" | "B" => JobState::Running,
        "S" | "U" => JobState::Suspended,
        "E" => JobState::Completing,
        "F" | "X" | "C" => ended(a, started, flavor),
        _ => JobState::Unknown,
    }
}

/// PBS Pro's substate 91 and comment "... and terminated" say `qdel`; a negative exit status
/// is PBS's own reason (walltime: -29 in PBS Pro, -11 in Torque).
fn ended(a: &Attributes, started: bool, flavor: Flavor) -> JobState {
    let comment = a.get("comment").unwrap_or_default();
    if a.number("substate") == Some(91) || comment.contains("terminated") {
        return JobState::Cancelled;
    }
    let walltime = match flavor {
        Flavor::PbsPro => -29,
        Flavor::Torque => -11,
    };
    match a.number("Exit_status").or_else(|| a.number("exit_status")) {
        Some(code) if code == walltime => JobState::Timeout,
        _ if comment.contains("exceeded resource walltime") => JobState::Timeout,
        Some(0) => JobState::Done,
        Some(_) => JobState::Failed,
        // No exit status: it never ran (deleted while it waited).
        None if !started => JobState::Cancelled,
        None => JobState::Unknown,
    }
}

/// PBS's exit status as an exit code: 256 + n when signal n ended the job (the common set
/// says 128 + n); negative ones are PBS's own failures, no exit code of the job's.
fn exit_code(status: i64) -> Option<i32> {
    let code = match status {
        ..0 => return None,
        256.. => 128 + (status - 256),
        _ => status,
    };
    i32::try_from(code).ok()
}

/// The hosts of `exec_host` (`n1/0*2+n2/0*2`, Torque's `n1/0-3+n2/0-3`), once each.
fn hosts(exec_host: &str) -> String {
    let mut names: Vec<&str> = Vec::new();
    for part in exec_host.split('+') {
        let name = part.split('/').next().unwrap_or_default().trim();
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names.join(",")
}

/// A PBS size (`3880844kb`, `16gb`, `1024`: bytes) in bytes; 0 when unreadable.
pub fn size(text: &str) -> u64 {
    let text = text.trim().to_ascii_lowercase();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let Ok(number) = text[..digits].parse::<u64>() else {
        return 0;
    };
    let scale: u64 = match &text[digits..] {
        "" | "b" => 1,
        "kb" | "k" => 1 << 10,
        "mb" | "m" => 1 << 20,
        "gb" | "g" => 1 << 30,
        "tb" | "t" => 1 << 40,
        "pb" | "p" => 1 << 50,
        // Words of 8 bytes.
        "w" => 8,
        "kw" => 8 << 10,
        "mw" => 8 << 20,
        "gw" => 8 << 30,
        _ => return 0,
    };
    number.saturating_mul(scale)
}

/// A node's state from PBS's comma-joined states (`free`, `job-busy`, `down,offline`).
fn node_state(native: &str, busy: bool, full: bool) -> NodeState {
    let has = |s: &str| native.split(',').any(|n| n.trim() == s);
    if has("down") || has("state-unknown") || has("stale") || has("unresolvable") {
        NodeState::Down
    } else if has("offline") {
        if busy {
            NodeState::Draining
        } else {
            NodeState::Drained
        }
    } else if has("job-busy") || has("job-exclusive") || has("resv-exclusive") || has("busy") {
        NodeState::Allocated
    } else if has("free") || has("job-sharing") || has("time-shared") {
        match (busy, full) {
            (false, _) => NodeState::Idle,
            (true, false) => NodeState::Mixed,
            (true, true) => NodeState::Allocated,
        }
    } else {
        NodeState::Unknown
    }
}

/// The nodes of `pbsnodes -a -F json` (PBS Pro).
pub fn pbspro_nodes(text_: &str) -> Result<Vec<Node>, BatchError> {
    const COMMAND: &str = "pbsnodes -a -F json";
    let root: Value = serde_json::from_str(text_)
        .map_err(|e| BatchError::parse(COMMAND, e.to_string(), text_))?;
    let Some(nodes) = root.get("nodes").and_then(Value::as_object) else {
        return Err(BatchError::parse(COMMAND, "no nodes object", text_));
    };
    let mut list = Vec::new();
    for (name, node) in nodes {
        let field = |key: &str| node.get(key).map(text).unwrap_or_default();
        let resource = |group: &str, key: &str| {
            node.get(group)
                .and_then(|g| g.get(key))
                .map(text)
                .unwrap_or_default()
        };
        let count = |group: &str, key: &str| resource(group, key).parse::<u32>().unwrap_or(0);
        let native = field("state");
        let cpus = count("resources_available", "ncpus");
        let used = count("resources_assigned", "ncpus");
        let jobs = node
            .get("jobs")
            .and_then(Value::as_array)
            .is_some_and(|j| !j.is_empty());
        list.push(Node {
            name: name.clone(),
            state: node_state(&native, used > 0 || jobs, cpus > 0 && used >= cpus),
            native_state: native,
            cpus,
            cpus_allocated: used,
            memory: size(&resource("resources_available", "mem")),
            memory_allocated: size(&resource("resources_assigned", "mem")),
            gpus: count("resources_available", "ngpus"),
            queues: Some(field("queue"))
                .filter(|q| !q.is_empty())
                .into_iter()
                .collect(),
            reason: Some(field("comment")).filter(|c| !c.is_empty()),
        });
    }
    Ok(list)
}

/// The nodes of `pbsnodes -x` (Torque): `np` slots, `jobs` as `core/job` (`0-3/12.srv`) and
/// memory in `status` (`physmem=16318412kb`).
pub fn torque_nodes(text_: &str) -> Result<Vec<Node>, BatchError> {
    const COMMAND: &str = "pbsnodes -x";
    let doc = roxmltree::Document::parse(text_)
        .map_err(|e| BatchError::parse(COMMAND, e.to_string(), text_))?;
    if !doc.root_element().has_tag_name("Data") {
        return Err(BatchError::parse(COMMAND, "no <Data>", text_));
    }
    let mut list = Vec::new();
    for node in doc
        .root_element()
        .children()
        .filter(|n| n.has_tag_name("Node"))
    {
        let field = |name: &str| {
            node.children()
                .find(|c| c.has_tag_name(name))
                .and_then(|c| c.text())
                .map(str::trim)
                .unwrap_or_default()
        };
        let name = field("name");
        if name.is_empty() {
            return Err(BatchError::parse(COMMAND, "a node without a name", text_));
        }
        let cpus: u32 = field("np").parse().unwrap_or(0);
        let used = cores(field("jobs"));
        let status: BTreeMap<&str, &str> = field("status")
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let native = field("state");
        list.push(Node {
            name: name.to_string(),
            state: node_state(native, used > 0, cpus > 0 && used >= cpus),
            native_state: native.to_string(),
            cpus,
            cpus_allocated: used,
            memory: status.get("physmem").map_or(0, |m| size(m)),
            memory_allocated: 0,
            gpus: field("gpus").parse().unwrap_or(0),
            queues: Vec::new(),
            reason: Some(field("note").to_string()).filter(|n| !n.is_empty()),
        });
    }
    Ok(list)
}

/// Cores in use in Torque's `jobs` (`0/12.srv,1/12.srv`, `0-3/12.srv`).
fn cores(jobs: &str) -> u32 {
    jobs.split(',')
        .filter_map(|item| item.split_once('/'))
        .map(|(cores, _)| match cores.split_once('-') {
            Some((a, b)) => match (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 1,
            },
            None => 1,
        })
        .fold(0u32, u32::saturating_add)
}

/// `qmgr -c 'print server'`: the server's settings (`set server name = value`, a `+=` line
/// adding to a list) and its queues, open (`enabled`) and started or not.
pub fn server(text: &str) -> (BTreeMap<String, String>, Vec<Queue>) {
    let mut settings = BTreeMap::new();
    let mut queues: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.splitn(3, ' ').collect();
        match words.as_slice() {
            ["create", "queue", name] => {
                let name = name.split_whitespace().next().unwrap_or_default();
                if !queues.iter().any(|(n, _)| n == name) {
                    queues.push((name.to_string(), BTreeMap::new()));
                }
            }
            ["set", "server", rest] => assign(&mut settings, rest),
            ["set", "queue", rest] => {
                let Some((name, rest)) = rest.split_once(' ') else {
                    continue;
                };
                if !queues.iter().any(|(n, _)| n == name) {
                    queues.push((name.to_string(), BTreeMap::new()));
                }
                if let Some((_, attributes)) = queues.iter_mut().find(|(n, _)| n == name) {
                    assign(attributes, rest);
                }
            }
            _ => {}
        }
    }
    let default = settings.get("default_queue").cloned();
    let queues = queues
        .into_iter()
        .map(|(name, a)| {
            let yes = |key: &str| a.get(key).is_some_and(|v| v.eq_ignore_ascii_case("true"));
            // Unset is False: a new queue is neither enabled nor started.
            let state = match (yes("enabled"), yes("started")) {
                (true, true) => "up",
                (false, true) => "drain",
                (false, false) => "down",
                (true, false) => "inactive",
            };
            Queue {
                default: default.as_deref() == Some(name.as_str()),
                state: state.into(),
                max_walltime: a
                    .get("resources_max.walltime")
                    .and_then(|t| crate::parse_walltime(t).ok()),
                nodes: String::new(),
                name,
            }
        })
        .collect();
    (settings, queues)
}

/// `name = value` or `name += value` into `map`, quotes removed.
fn assign(map: &mut BTreeMap<String, String>, text: &str) {
    let (name, value, add) = match text.split_once(" += ") {
        Some((n, v)) => (n, v, true),
        None => match text.split_once(" = ") {
            Some((n, v)) => (n, v, false),
            None => return,
        },
    };
    let value = value.trim();
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    let entry = map.entry(name.trim().to_string()).or_default();
    if add && !entry.is_empty() {
        entry.push(',');
    } else {
        entry.clear();
    }
    entry.push_str(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    const QSTAT: &str = include_str!("../../tests/recorded/pbs/qstat-pbspro.json");
    const PBSNODES: &str = include_str!("../../tests/recorded/pbs/pbsnodes-pbspro.json");
    const QSTAT_TORQUE: &str = include_str!("../../tests/recorded/pbs/qstat-torque.xml");
    const PBSNODES_TORQUE: &str = include_str!("../../tests/recorded/pbs/pbsnodes-torque.xml");
    const SERVER: &str = include_str!("../../tests/recorded/pbs/qmgr-print-server.txt");

    fn by_id(jobs: &[Job], id: &str) -> Job {
        jobs.iter()
            .find(|j| j.id == id)
            .unwrap_or_else(|| panic!("no {id} in {jobs:?}"))
            .clone()
    }

    #[test]
    fn recorded_pbs_pro_jobs_read_whole() {
        let jobs = pbspro_jobs(QSTAT).unwrap();
        let mut summary: Vec<(&str, JobState, Option<i32>)> = jobs
            .iter()
            .map(|j| (j.id.as_str(), j.state, j.exit_code))
            .collect();
        summary.sort();
        assert_eq!(
            summary,
            [
                ("100.pbs1", JobState::Done, Some(0)),
                ("101.pbs1", JobState::Failed, Some(3)),
                ("102.pbs1", JobState::Cancelled, Some(143)),
                ("103.pbs1", JobState::Timeout, None),
                ("104.pbs1", JobState::Running, None),
                ("105.pbs1", JobState::Held, None),
                ("106.pbs1", JobState::Queued, None),
                ("107[1].pbs1", JobState::Done, Some(0)),
                ("107[2].pbs1", JobState::Running, None),
                ("107[3].pbs1", JobState::Queued, None),
                ("107[4].pbs1", JobState::Queued, None),
                ("107[].pbs1", JobState::Running, None),
            ]
        );
        let running = by_id(&jobs, "104.pbs1");
        assert_eq!(running.user, "alice");
        assert_eq!(running.name, "train");
        assert_eq!(running.nodes.as_deref(), Some("n1,n2"));
        assert_eq!(running.queue.as_deref(), Some("workq"));
        assert_eq!(running.submitted_at, Some(1_796_282_100));
        assert_eq!(running.started_at, Some(1_796_282_160));
        assert_eq!(running.native_state, "R");
        assert_eq!(by_id(&jobs, "101.pbs1").ended_at, Some(1_796_282_243));
        assert_eq!(
            by_id(&jobs, "107[1].pbs1").array_id.as_deref(),
            Some("107[].pbs1")
        );
        let array = by_id(&jobs, "107[].pbs1");
        assert_eq!(array.tasks.as_deref(), Some("3-4"));
        assert_eq!(array.array_id, None);
        assert_eq!(
            by_id(&jobs, "105.pbs1").reason.as_deref(),
            Some("Job held by alice on Thu Dec  3 07:16:10 2026")
        );
    }

    #[test]
    fn recorded_torque_jobs_read_whole() {
        let jobs = torque_jobs(QSTAT_TORQUE).unwrap();
        let summary: Vec<(&str, JobState, Option<i32>)> = jobs
            .iter()
            .map(|j| (j.id.as_str(), j.state, j.exit_code))
            .collect();
        assert_eq!(
            summary,
            [
                ("200.torque1", JobState::Done, Some(0)),
                ("201.torque1", JobState::Failed, Some(143)),
                ("202.torque1", JobState::Running, None),
                ("203[1].torque1", JobState::Held, None),
            ]
        );
        assert_eq!(jobs[2].nodes.as_deref(), Some("n1"));
        assert_eq!(jobs[2].started_at, Some(1_796_282_160));
        assert_eq!(jobs[0].ended_at, Some(1_796_282_243));
        assert_eq!(jobs[3].array_id.as_deref(), Some("203[].torque1"));
        assert_eq!(jobs[3].user, "bob");
    }

    #[test]
    fn recorded_nodes_and_server_read_whole() {
        let nodes = pbspro_nodes(PBSNODES).unwrap();
        let states: Vec<(&str, NodeState)> =
            nodes.iter().map(|n| (n.name.as_str(), n.state)).collect();
        assert_eq!(
            states,
            [
                ("n1", NodeState::Mixed),
                ("n2", NodeState::Draining),
                ("n3", NodeState::Down)
            ]
        );
        assert_eq!(nodes[0].cpus, 8);
        assert_eq!(nodes[0].cpus_allocated, 2);
        assert_eq!(nodes[0].memory, 16_318_412 << 10);
        assert_eq!(nodes[0].gpus, 2);
        assert_eq!(nodes[1].reason.as_deref(), Some("disk replacement"));
        let nodes = torque_nodes(PBSNODES_TORQUE).unwrap();
        assert_eq!(nodes[0].state, NodeState::Mixed);
        assert_eq!(nodes[0].cpus_allocated, 4);
        assert_eq!(nodes[0].memory, 16_318_412 << 10);
        assert_eq!(nodes[1].state, NodeState::Drained);
        assert_eq!(nodes[1].reason.as_deref(), Some("bad dimm"));
        let (settings, queues) = server(SERVER);
        assert_eq!(settings["job_history_enable"], "True");
        assert_eq!(settings["acl_roots"], "root@*,admin@*");
        let summary: Vec<(&str, &str, bool, Option<u64>)> = queues
            .iter()
            .map(|q| (q.name.as_str(), q.state.as_str(), q.default, q.max_walltime))
            .collect();
        assert_eq!(
            summary,
            [
                ("workq", "up", true, Some(86_400)),
                ("gpu", "drain", false, None),
                ("old", "down", false, None)
            ]
        );
    }

    #[test]
    fn exit_statuses_and_sizes() {
        assert_eq!(exit_code(0), Some(0));
        assert_eq!(exit_code(3), Some(3));
        assert_eq!(exit_code(271), Some(143));
        assert_eq!(exit_code(-29), None);
        assert_eq!(size("3880844kb"), 3_880_844 << 10);
        assert_eq!(size("16gb"), 16 << 30);
        assert_eq!(size("1024"), 1024);
        assert_eq!(size("2mw"), 16 << 20);
        assert_eq!(size("lots"), 0);
        assert_eq!(hosts("n1/0*2+n2/0*2+n1/1"), "n1,n2");
        assert_eq!(cores("0-3/12.srv,5/13.srv"), 5);
    }

    #[test]
    fn empty_listings() {
        let empty = r#"{"timestamp": 1, "pbs_version": "2023.1.1", "pbs_server": "pbs1"}"#;
        assert!(pbspro_jobs(empty).unwrap().is_empty());
        assert!(torque_jobs("<Data></Data>").unwrap().is_empty());
        assert!(matches!(pbspro_jobs(""), Err(BatchError::Parse { .. })));
        assert!(matches!(torque_jobs(""), Err(BatchError::Parse { .. })));
        assert!(matches!(pbspro_nodes("{}"), Err(BatchError::Parse { .. })));
    }

    /// Every reader, on any text: a value or a typed error, never a panic.
    fn read_all(text: &str) {
        let _ = pbspro_jobs(text);
        let _ = torque_jobs(text);
        let _ = pbspro_nodes(text);
        let _ = torque_nodes(text);
        let _ = server(text);
    }

    const ALL: [&str; 5] = [QSTAT, PBSNODES, QSTAT_TORQUE, PBSNODES_TORQUE, SERVER];

    /// The JSON and XML outputs with their readers: any of them cut short is a parse error.
    type Reader = fn(&str) -> Result<usize, BatchError>;
    const STRUCTURED: [(&str, Reader); 4] = [
        (QSTAT, |t| pbspro_jobs(t).map(|j| j.len())),
        (PBSNODES, |t| pbspro_nodes(t).map(|n| n.len())),
        (QSTAT_TORQUE, |t| torque_jobs(t).map(|j| j.len())),
        (PBSNODES_TORQUE, |t| torque_nodes(t).map(|n| n.len())),
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
