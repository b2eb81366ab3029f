//! A `JobSpec` as a `qsub` script: every option a `#PBS` line, then the environment exported
//! and the command. PBS Pro asks for resources in chunks (`-l select=N:ncpus=..:mem=..`, one
//! chunk a node, placed with `-l place=scatter`) and runs jobs in the home directory (the
//! script changes into `directory`); Torque asks for `-l nodes=N:ppn=P`, memory for the whole
//! job, and has `-d` for the working directory. Both read paths relative to where `qsub` runs,
//! so output files are made absolute under `directory`.

use crate::{DependencyKind, JobSpec};

use super::Flavor;

/// The script `qsub` reads on its standard input.
pub fn script(spec: &JobSpec, flavor: Flavor) -> String {
    let mut lines = vec!["#!/bin/sh".to_string()];
    let mut option = |text: String| lines.push(format!("#PBS {text}"));
    option("-S /bin/sh".into());
    option(format!("-N {}", spec.job_name()));
    if let (Flavor::Torque, Some(dir)) = (flavor, &spec.directory) {
        option(format!("-d {dir}"));
    }
    for (flag, path) in [("-o", &spec.stdout), ("-e", &spec.stderr)] {
        if let Some(path) = path {
            option(format!("{flag} {}", under(spec.directory.as_deref(), path)));
        }
    }
    for resources in match flavor {
        Flavor::PbsPro => chunks(spec),
        Flavor::Torque => torque_nodes(spec),
    } {
        option(resources);
    }
    if let Some(secs) = spec.walltime {
        option(format!(
            "-l walltime={}:{:02}:{:02}",
            secs / 3600,
            secs % 3600 / 60,
            secs % 60
        ));
    }
    if let Some(queue) = &spec.queue {
        option(format!("-q {queue}"));
    }
    if let Some(account) = &spec.account {
        option(format!("-A {account}"));
    }
    if let Some(array) = &spec.array {
        let limit = array
            .max_concurrent
            .map(|m| format!("%{m}"))
            .unwrap_or_default();
        match flavor {
            Flavor::PbsPro => option(format!(
                "-J {}-{}:{}{limit}",
                array.start, array.end, array.step
            )),
            // Torque takes ranges and lists but no step: a stepped array is listed.
            Flavor::Torque if array.step == 1 => {
                option(format!("-t {}-{}{limit}", array.start, array.end))
            }
            Flavor::Torque => {
                let ids: Vec<String> = (array.start..=array.end)
                    .step_by(array.step as usize)
                    .map(|t| t.to_string())
                    .collect();
                option(format!("-t {}{limit}", ids.join(",")));
            }
        }
    }
    if spec.hold {
        option("-h".into());
    }
    if !spec.dependencies.is_empty() {
        let mut groups: Vec<String> = Vec::new();
        for kind in [DependencyKind::AfterOk, DependencyKind::AfterAny] {
            let ids: Vec<&str> = spec
                .dependencies
                .iter()
                .filter(|d| d.kind == kind)
                .map(|d| d.job.as_str())
                .collect();
            if !ids.is_empty() {
                let name = match kind {
                    DependencyKind::AfterOk => "afterok",
                    DependencyKind::AfterAny => "afterany",
                };
                groups.push(format!("{name}:{}", ids.join(":")));
            }
        }
        option(format!("-W depend={}", groups.join(",")));
    }
    for native in spec.native.get("pbs").into_iter().flatten() {
        option(native.clone());
    }
    if let (Flavor::PbsPro, Some(dir)) = (flavor, &spec.directory) {
        lines.push(format!("cd {} || exit 1", crate::shell_quote(dir)));
    }
    if let Some(stdin) = &spec.stdin {
        lines.push(format!("exec <{}", crate::shell_quote(stdin)));
    }
    lines.extend(spec.script_body());
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// `path` under `directory` when relative (qsub would take it relative to its own directory).
fn under(directory: Option<&str>, path: &str) -> String {
    match directory {
        Some(dir) if !path.starts_with('/') => format!("{}/{path}", dir.trim_end_matches('/')),
        _ => path.to_string(),
    }
}

/// Tasks on each node, rounded up so that every task has a place.
fn tasks_per_node(spec: &JobSpec) -> Option<u32> {
    let r = &spec.resources;
    r.tasks.map(|t| t.div_ceil(r.nodes.unwrap_or(1).max(1)))
}

/// PBS Pro's `-l select` (one chunk a node) and `-l place`, if anything is asked for.
fn chunks(spec: &JobSpec) -> Vec<String> {
    let r = &spec.resources;
    let per_node = tasks_per_node(spec);
    let mut chunk = Vec::new();
    if per_node.is_some() || r.cpus_per_task.is_some() {
        let cpus = u64::from(per_node.unwrap_or(1)) * u64::from(r.cpus_per_task.unwrap_or(1));
        chunk.push(format!("ncpus={cpus}"));
    }
    if let Some(tasks) = per_node {
        chunk.push(format!("mpiprocs={tasks}"));
    }
    if let Some(bytes) = r.memory_per_node {
        // PBS counts in binary units; round up so the job gets at least what it asked for.
        chunk.push(format!("mem={}mb", bytes.div_ceil(1 << 20)));
    }
    if let Some(gpus) = r.gpus_per_node {
        chunk.push(format!("ngpus={gpus}"));
    }
    if let Some(gpus) = r.gpus_per_task {
        chunk.push(format!(
            "ngpus={}",
            u64::from(gpus) * u64::from(per_node.unwrap_or(1))
        ));
    }
    let nodes = r.nodes.unwrap_or(1);
    let mut lines = Vec::new();
    if !chunk.is_empty() || r.nodes.is_some() {
        if chunk.is_empty() {
            chunk.push("ncpus=1".into());
        }
        lines.push(format!("-l select={nodes}:{}", chunk.join(":")));
    }
    let mut place = Vec::new();
    if nodes > 1 {
        place.push("scatter");
    }
    if r.exclusive {
        place.push("excl");
    }
    if !place.is_empty() {
        lines.push(format!("-l place={}", place.join(":")));
    }
    lines
}

/// Torque's `-l nodes=N:ppn=P[:gpus=G]`, `-l mem` (the whole job's) and `-n` (node-exclusive).
fn torque_nodes(spec: &JobSpec) -> Vec<String> {
    let r = &spec.resources;
    let per_node = tasks_per_node(spec);
    let nodes = r.nodes.unwrap_or(1);
    let mut lines = Vec::new();
    let gpus = match (r.gpus_per_node, r.gpus_per_task) {
        (Some(g), _) => Some(u64::from(g)),
        (None, Some(g)) => Some(u64::from(g) * u64::from(per_node.unwrap_or(1))),
        (None, None) => None,
    };
    if r.nodes.is_some() || per_node.is_some() || r.cpus_per_task.is_some() || gpus.is_some() {
        let ppn = u64::from(per_node.unwrap_or(1)) * u64::from(r.cpus_per_task.unwrap_or(1));
        let mut request = format!("-l nodes={nodes}:ppn={ppn}");
        if let Some(gpus) = gpus {
            request.push_str(&format!(":gpus={gpus}"));
        }
        lines.push(request);
    }
    if let Some(bytes) = r.memory_per_node {
        let total = bytes.saturating_mul(u64::from(nodes));
        lines.push(format!("-l mem={}mb", total.div_ceil(1 << 20)));
    }
    if r.exclusive {
        lines.push("-n".into());
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> JobSpec {
        JobSpec::parse_json(
            r#"{"name": "train", "executable": "/usr/bin/python3", "arguments": ["a b"],
                "directory": "/scratch/u", "stdin": "in.txt", "stdout": "out.txt",
                "stderr": "/tmp/err.txt", "environment": {"X": "1,2"},
                "resources": {"nodes": 2, "tasks": 4, "cpus_per_task": 2,
                              "memory_per_node": "1500MB", "gpus_per_node": 1,
                              "exclusive": true},
                "walltime": "1-01:02:03", "queue": "gpu", "account": "proj",
                "array": {"start": 1, "end": 9, "step": 2, "max_concurrent": 2},
                "hold": true,
                "dependencies": [{"kind": "after_ok", "job": "12.srv"},
                                 {"kind": "after_any", "job": "13.srv"},
                                 {"kind": "after_ok", "job": "14.srv"}],
                "native": {"pbs": ["-m n"], "slurm": ["--qos=high"]}}"#,
        )
        .unwrap()
    }

    #[test]
    fn every_field_becomes_its_pbs_pro_option() {
        let expected = "#!/bin/sh
#PBS -S /bin/sh
#PBS -N train
#PBS -o /scratch/u/out.txt
#PBS -e /tmp/err.txt
#PBS -l select=2:ncpus=4:mpiprocs=2:mem=1431mb:ngpus=1
#PBS -l place=scatter:excl
#PBS -l walltime=25:02:03
#PBS -q gpu
#PBS -A proj
#PBS -J 1-9:2%2
#PBS -h
#PBS -W depend=afterok:12.srv:14.srv,afterany:13.srv
#PBS -m n
cd /scratch/u || exit 1
exec <in.txt
export X='1,2'
exec /usr/bin/python3 'a b'
";
        assert_eq!(script(&full(), Flavor::PbsPro), expected);
    }

    #[test]
    fn every_field_becomes_its_torque_option() {
        let expected = "#!/bin/sh
#PBS -S /bin/sh
#PBS -N train
#PBS -d /scratch/u
#PBS -o /scratch/u/out.txt
#PBS -e /tmp/err.txt
#PBS -l nodes=2:ppn=4:gpus=1
#PBS -l mem=2862mb
#PBS -n
#PBS -l walltime=25:02:03
#PBS -q gpu
#PBS -A proj
#PBS -t 1,3,5,7,9%2
#PBS -h
#PBS -W depend=afterok:12.srv:14.srv,afterany:13.srv
#PBS -m n
exec <in.txt
export X='1,2'
exec /usr/bin/python3 'a b'
";
        assert_eq!(script(&full(), Flavor::Torque), expected);
    }

    #[test]
    fn a_plain_script_asks_for_nothing_more() {
        let spec = JobSpec::parse_json(r#"{"script": "echo hi", "array": {"start": 0, "end": 3}}"#)
            .unwrap();
        assert_eq!(
            script(&spec, Flavor::PbsPro),
            "#!/bin/sh\n#PBS -S /bin/sh\n#PBS -N corral\n#PBS -J 0-3:1\necho hi\n"
        );
        assert_eq!(
            script(&spec, Flavor::Torque),
            "#!/bin/sh\n#PBS -S /bin/sh\n#PBS -N corral\n#PBS -t 0-3\necho hi\n"
        );
    }
}
