//! A `JobSpec` as a `qsub` script: every option a `#$` line, the environment exported in the
//! body, then the command. Grid Engine counts slots, not nodes and tasks: more than one slot
//! needs the site's parallel environment; memory is asked per slot (`h_vmem`); GPUs and
//! exclusive nodes are the site's complexes (`gpu`, `exclusive`), which `qsub -w e` refuses
//! where they are not defined.

use crate::{BatchError, DependencyKind, JobSpec};

/// The script `qsub` reads on its standard input; `parallel_environment` is the site's PE for
/// jobs of more than one slot.
pub fn script(spec: &JobSpec, parallel_environment: Option<&str>) -> Result<String, BatchError> {
    let mut lines = vec!["#!/bin/sh".to_string()];
    let mut option = |text: String| lines.push(format!("#$ {text}"));
    option("-S /bin/sh".into());
    option(format!("-N {}", spec.job_name()));
    match &spec.directory {
        Some(dir) => option(format!("-wd {dir}")),
        None => option("-cwd".into()),
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
    let slots = u64::from(r.tasks.unwrap_or(1)) * u64::from(r.cpus_per_task.unwrap_or(1));
    if slots > 1 || r.nodes.is_some_and(|n| n > 1) {
        let Some(pe) = parallel_environment else {
            return Err(BatchError::invalid(
                "resources",
                format!(
                    "{slots} slots (or more than one node) need a parallel environment: set the \
                     Grid Engine adaptor's parallel_environment"
                ),
            ));
        };
        option(format!("-pe {pe} {slots}"));
    }
    if let Some(bytes) = r.memory_per_node {
        // h_vmem is per slot.
        option(format!("-l h_vmem={}M", bytes.div_ceil(slots << 20)));
    }
    if let Some(gpus) = r.gpus_per_node {
        option(format!("-l gpu={gpus}"));
    }
    if let Some(gpus) = r.gpus_per_task {
        option(format!(
            "-l gpu={}",
            u64::from(gpus) * u64::from(r.tasks.unwrap_or(1))
        ));
    }
    if r.exclusive {
        option("-l exclusive=true".into());
    }
    if let Some(secs) = spec.walltime {
        option(format!(
            "-l h_rt={}:{:02}:{:02}",
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
        option(format!("-t {}-{}:{}", array.start, array.end, array.step));
        if let Some(max) = array.max_concurrent {
            option(format!("-tc {max}"));
        }
    }
    if spec.hold {
        option("-h".into());
    }
    if !spec.dependencies.is_empty() {
        if spec
            .dependencies
            .iter()
            .any(|d| d.kind == DependencyKind::AfterOk)
        {
            return Err(BatchError::Unsupported {
                scheduler: "gridengine",
                what: "start a job only after another succeeded (after_ok): -hold_jid waits \
                       for the end whatever it was; use after_any"
                    .into(),
            });
        }
        let ids: Vec<&str> = spec.dependencies.iter().map(|d| d.job.as_str()).collect();
        option(format!("-hold_jid {}", ids.join(",")));
    }
    for native in spec.native.get("gridengine").into_iter().flatten() {
        option(native.clone());
    }
    lines.extend(spec.script_body());
    let mut text = lines.join("\n");
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_becomes_its_qsub_option() {
        let spec = JobSpec::parse_json(
            r#"{"name": "train", "script": "echo hi", "directory": "/scratch/u",
                "stdout": "out.txt", "environment": {"X": "1"},
                "resources": {"tasks": 2, "cpus_per_task": 2, "memory_per_node": "4GiB",
                              "gpus_per_node": 1},
                "walltime": "1-01:02:03", "queue": "all.q", "account": "proj",
                "array": {"start": 1, "end": 4, "max_concurrent": 2}, "hold": true,
                "dependencies": [{"kind": "after_any", "job": "12"}],
                "native": {"gridengine": ["-l arch=lx-amd64"]}}"#,
        )
        .unwrap();
        let expected = "#!/bin/sh
#$ -S /bin/sh
#$ -N train
#$ -wd /scratch/u
#$ -o out.txt
#$ -pe smp 4
#$ -l h_vmem=1024M
#$ -l gpu=1
#$ -l h_rt=25:02:03
#$ -q all.q
#$ -A proj
#$ -t 1-4:1
#$ -tc 2
#$ -h
#$ -hold_jid 12
#$ -l arch=lx-amd64
export X=1
echo hi
";
        assert_eq!(script(&spec, Some("smp")).unwrap(), expected);
        let e = script(&spec, None).unwrap_err();
        assert!(e.to_string().contains("parallel_environment"), "{e}");
    }

    #[test]
    fn after_ok_is_refused_as_grid_engine_cannot_do_it() {
        let spec = JobSpec::parse_json(
            r#"{"script": "true", "dependencies": [{"kind": "after_ok", "job": "12"}]}"#,
        )
        .unwrap();
        let e = script(&spec, None).unwrap_err();
        assert!(matches!(e, BatchError::Unsupported { .. }), "{e}");
    }
}
