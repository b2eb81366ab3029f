//! A `JobSpec` as a `bsub` script: every option a `#BSUB` line, then the environment exported
//! and the command. LSF counts slots: `tasks` × `cpus_per_task` of them (`-n`), spread over the
//! nodes by `span[ptile=..]` (or kept on one host, `span[hosts=1]`); memory is reserved per host
//! (`rusage[mem=..]`, LSF's default), GPUs with `-gpu`, the walltime in minutes (`-W`), an array
//! in the job's name (`-J "name[1-10:2]%2"`).

use crate::{DependencyKind, JobSpec};

/// The script `bsub` reads on its standard input.
pub fn script(spec: &JobSpec) -> String {
    let mut lines = vec!["#!/bin/sh".to_string()];
    let mut option = |text: String| lines.push(format!("#BSUB {text}"));
    match &spec.array {
        Some(array) => {
            let mut range = format!("{}-{}", array.start, array.end);
            if array.step != 1 {
                range.push_str(&format!(":{}", array.step));
            }
            let limit = array
                .max_concurrent
                .map(|m| format!("%{m}"))
                .unwrap_or_default();
            option(format!("-J \"{}[{range}]{limit}\"", spec.job_name()));
        }
        None => option(format!("-J {}", spec.job_name())),
    }
    if let Some(dir) = &spec.directory {
        option(format!("-cwd {dir}"));
    }
    for (flag, path) in [
        ("-i", &spec.stdin),
        ("-o", &spec.stdout),
        ("-e", &spec.stderr),
    ] {
        if let Some(path) = path {
            option(format!("{flag} {path}"));
        }
    }
    let r = &spec.resources;
    let nodes = r.nodes.unwrap_or(1);
    let tasks = r.tasks.unwrap_or(if r.nodes.is_some() { nodes } else { 1 });
    let slots = u64::from(tasks) * u64::from(r.cpus_per_task.unwrap_or(1));
    if slots > 1 || r.tasks.is_some() {
        option(format!("-n {slots}"));
    }
    let mut requirement = Vec::new();
    if nodes > 1 {
        requirement.push(format!("span[ptile={}]", slots.div_ceil(u64::from(nodes))));
    } else if slots > 1 {
        requirement.push("span[hosts=1]".to_string());
    }
    if let Some(bytes) = r.memory_per_node {
        // Round up so the job gets at least what it asked for.
        requirement.push(format!("rusage[mem={}MB]", bytes.div_ceil(1 << 20)));
    }
    if !requirement.is_empty() {
        option(format!("-R \"{}\"", requirement.join(" ")));
    }
    if let Some(gpus) = r.gpus_per_node {
        option(format!("-gpu \"num={gpus}\""));
    }
    if let Some(gpus) = r.gpus_per_task {
        option(format!("-gpu \"num={gpus}/task\""));
    }
    if r.exclusive {
        option("-x".into());
    }
    if let Some(secs) = spec.walltime {
        // Minutes, rounded up.
        let minutes = secs.div_ceil(60);
        option(format!("-W {}:{:02}", minutes / 60, minutes % 60));
    }
    if let Some(queue) = &spec.queue {
        option(format!("-q {queue}"));
    }
    if let Some(account) = &spec.account {
        option(format!("-P {account}"));
    }
    if spec.hold {
        option("-H".into());
    }
    if !spec.dependencies.is_empty() {
        let conditions: Vec<String> = spec
            .dependencies
            .iter()
            .map(|d| match d.kind {
                DependencyKind::AfterOk => format!("done({})", d.job),
                DependencyKind::AfterAny => format!("ended({})", d.job),
            })
            .collect();
        option(format!("-w \"{}\"", conditions.join(" && ")));
    }
    for native in spec.native.get("lsf").into_iter().flatten() {
        option(native.clone());
    }
    lines.extend(spec.script_body());
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_becomes_its_bsub_option() {
        let spec = JobSpec::parse_json(
            r#"{"name": "train", "executable": "/usr/bin/python3", "arguments": ["a b"],
                "directory": "/scratch/u", "stdin": "in.txt", "stdout": "out.txt",
                "environment": {"X": "1,2"},
                "resources": {"nodes": 2, "tasks": 4, "cpus_per_task": 2,
                              "memory_per_node": "1500MB", "gpus_per_node": 1,
                              "exclusive": true},
                "walltime": "1-01:02:03", "queue": "gpu", "account": "proj",
                "array": {"start": 1, "end": 9, "step": 2, "max_concurrent": 2},
                "hold": true,
                "dependencies": [{"kind": "after_ok", "job": "12"},
                                 {"kind": "after_any", "job": "13[2]"}],
                "native": {"lsf": ["-app big"], "pbs": ["-m n"]}}"#,
        )
        .unwrap();
        let expected = "#!/bin/sh
#BSUB -J \"train[1-9:2]%2\"
#BSUB -cwd /scratch/u
#BSUB -i in.txt
#BSUB -o out.txt
#BSUB -n 8
#BSUB -R \"span[ptile=4] rusage[mem=1431MB]\"
#BSUB -gpu \"num=1\"
#BSUB -x
#BSUB -W 25:03
#BSUB -q gpu
#BSUB -P proj
#BSUB -H
#BSUB -w \"done(12) && ended(13[2])\"
#BSUB -app big
export X='1,2'
exec /usr/bin/python3 'a b'
";
        assert_eq!(script(&spec), expected);
    }

    #[test]
    fn one_host_unless_told_otherwise() {
        let spec = JobSpec::parse_json(
            r#"{"script": "true", "resources": {"cpus_per_task": 4}, "walltime": 60}"#,
        )
        .unwrap();
        assert_eq!(
            script(&spec),
            "#!/bin/sh\n#BSUB -J corral\n#BSUB -n 4\n#BSUB -R \"span[hosts=1]\"\n#BSUB -W 0:01\ntrue\n"
        );
    }
}
