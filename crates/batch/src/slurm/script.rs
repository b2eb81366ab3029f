//! A `JobSpec` as an `sbatch` script: every option an `#SBATCH` line (so the script alone says
//! how the job was asked for, and a dry run shows it), the environment exported in the body
//! (values with commas or quotes would not survive `--export`), then the command.

use crate::{DependencyKind, JobSpec};

/// The script `sbatch` reads on its standard input.
pub fn script(spec: &JobSpec) -> String {
    let mut lines = vec!["#!/bin/sh".to_string()];
    let mut option = |text: String| lines.push(format!("#SBATCH {text}"));
    option(format!("--job-name={}", spec.job_name()));
    if let Some(dir) = &spec.directory {
        option(format!("--chdir={dir}"));
    }
    for (flag, path) in [
        ("--input", &spec.stdin),
        ("--output", &spec.stdout),
        ("--error", &spec.stderr),
    ] {
        if let Some(path) = path {
            option(format!("{flag}={path}"));
        }
    }
    let r = &spec.resources;
    for (flag, value) in [
        ("--nodes", r.nodes),
        ("--ntasks", r.tasks),
        ("--cpus-per-task", r.cpus_per_task),
        ("--gpus-per-node", r.gpus_per_node),
        ("--gpus-per-task", r.gpus_per_task),
    ] {
        if let Some(value) = value {
            option(format!("{flag}={value}"));
        }
    }
    if let Some(bytes) = r.memory_per_node {
        // Slurm counts in MiB ("M"); round up so the job gets at least what it asked for.
        option(format!("--mem={}M", bytes.div_ceil(1 << 20)));
    }
    if r.exclusive {
        option("--exclusive".into());
    }
    if let Some(secs) = spec.walltime {
        option(format!("--time={}", walltime(secs)));
    }
    if let Some(queue) = &spec.queue {
        option(format!("--partition={queue}"));
    }
    if let Some(account) = &spec.account {
        option(format!("--account={account}"));
    }
    if let Some(array) = &spec.array {
        let mut range = format!("{}-{}", array.start, array.end);
        if array.step != 1 {
            range.push_str(&format!(":{}", array.step));
        }
        if let Some(max) = array.max_concurrent {
            range.push_str(&format!("%{max}"));
        }
        option(format!("--array={range}"));
    }
    if spec.hold {
        option("--hold".into());
    }
    if !spec.dependencies.is_empty() {
        let list: Vec<String> = spec
            .dependencies
            .iter()
            .map(|d| {
                let kind = match d.kind {
                    DependencyKind::AfterOk => "afterok",
                    DependencyKind::AfterAny => "afterany",
                };
                format!("{kind}:{}", d.job)
            })
            .collect();
        option(format!("--dependency={}", list.join(",")));
    }
    for native in spec.native.get("slurm").into_iter().flatten() {
        option(native.clone());
    }
    lines.extend(spec.script_body());
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// Seconds as Slurm's `D-HH:MM:SS`.
pub fn walltime(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    format!(
        "{days}-{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_becomes_its_sbatch_option() {
        let spec = JobSpec::parse_json(
            r#"{"name": "train", "executable": "/usr/bin/python3", "arguments": ["a b", "it's"],
                "directory": "/scratch/u", "stdout": "out.txt", "environment": {"X": "1,2"},
                "resources": {"nodes": 2, "tasks": 4, "cpus_per_task": 2,
                              "memory_per_node": "1500MB", "gpus_per_node": 1,
                              "exclusive": true},
                "walltime": "1-01:02:03", "queue": "gpu", "account": "proj",
                "array": {"start": 1, "end": 9, "step": 2, "max_concurrent": 2},
                "hold": true,
                "dependencies": [{"kind": "after_ok", "job": "12"},
                                 {"kind": "after_any", "job": "13"}],
                "native": {"slurm": ["--qos=high"], "pbs": ["-l place=scatter"]}}"#,
        )
        .unwrap();
        let text = script(&spec);
        let expected = "#!/bin/sh
#SBATCH --job-name=train
#SBATCH --chdir=/scratch/u
#SBATCH --output=out.txt
#SBATCH --nodes=2
#SBATCH --ntasks=4
#SBATCH --cpus-per-task=2
#SBATCH --gpus-per-node=1
#SBATCH --mem=1431M
#SBATCH --exclusive
#SBATCH --time=1-01:02:03
#SBATCH --partition=gpu
#SBATCH --account=proj
#SBATCH --array=1-9:2%2
#SBATCH --hold
#SBATCH --dependency=afterok:12,afterany:13
#SBATCH --qos=high
export X='1,2'
exec /usr/bin/python3 'a b' \"it's\"
";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_script_body_is_run_as_written() {
        let spec = JobSpec::parse_json(r#"{"script": "echo hi\nexit 3\n"}"#).unwrap();
        assert_eq!(
            script(&spec),
            "#!/bin/sh\n#SBATCH --job-name=corral\necho hi\nexit 3\n"
        );
    }
}
