//! Batch scripts: any job description (JSON) is either refused by its check, or rendered into a
//! Slurm and a Grid Engine script whose header holds exactly the directives it should: the
//! shebang, then one directive line per option the description asks for (the forced hold and
//! directory of a job with inputs among them), then the body as the description gives it. A
//! user's field with a line break in it would add a line to the header or end it early.
#![no_main]

use corral_batch::gridengine::GridEngine;
use corral_batch::slurm::{Accounting, Slurm};
use corral_batch::{BatchSystem, Commands, JobSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // `parse_json` checks what it reads: a refused description renders nothing.
    let Ok(spec) = JobSpec::parse_json(text) else {
        return;
    };
    let _ = spec.check_submitted();
    let mut forced = spec.clone();
    // What the manager does to a job with inputs: held, in a directory of its making.
    forced.hold = true;
    forced.directory = Some("/shared/corral/alice/job-1".into());
    for spec in [spec, forced] {
        let slurm = Slurm::new(Commands::default(), Accounting::None);
        let rendered = slurm.render(&spec).expect("a checked description renders");
        check_header(&spec, &rendered.script, "#SBATCH ", slurm_directives(&spec));
        let hold = rendered.script.lines().filter(|l| *l == "#SBATCH --hold");
        assert_eq!(hold.count(), usize::from(spec.hold), "{}", rendered.script);
        if let Some(dir) = &spec.directory {
            let chdir = format!("#SBATCH --chdir={dir}");
            assert!(
                rendered.script.lines().any(|l| l == chdir),
                "{}",
                rendered.script
            );
        }
        let gridengine = GridEngine::new(Commands::default(), Some("smp".into()));
        // Grid Engine refuses some descriptions Slurm takes (after_ok): that is a refusal too.
        if let Ok(rendered) = gridengine.render(&spec) {
            let header = rendered.script.lines().count() - 1 - body(&spec).len();
            check_header(&spec, &rendered.script, "#$ ", header);
            let lines: Vec<&str> = rendered.script.lines().skip(1).take(header).collect();
            assert_eq!(lines.iter().filter(|l| l.starts_with("#$ -N ")).count(), 1);
            assert_eq!(
                lines.iter().filter(|l| **l == "#$ -h").count(),
                usize::from(spec.hold),
                "{}",
                rendered.script
            );
        }
    }
});

/// The body's lines, as the description gives them.
fn body(spec: &JobSpec) -> Vec<String> {
    spec.script_body()
        .join("\n")
        .split('\n')
        .map(str::to_string)
        .collect()
}

/// `script` is the shebang, `directives` lines starting `prefix` each, and the body.
fn check_header(spec: &JobSpec, script: &str, prefix: &str, directives: usize) {
    let lines: Vec<&str> = script
        .strip_suffix('\n')
        .unwrap_or(script)
        .split('\n')
        .collect();
    let body = body(spec);
    assert_eq!(lines.len(), 1 + directives + body.len(), "{script}");
    assert_eq!(lines[0], "#!/bin/sh", "{script}");
    for line in &lines[1..=directives] {
        assert!(
            line.starts_with(prefix),
            "not a directive: {line:?} in {script}"
        );
    }
    assert_eq!(lines[1 + directives..], body[..], "{script}");
}

/// How many `#SBATCH` lines the description asks for, counted from its fields.
fn slurm_directives(spec: &JobSpec) -> usize {
    let r = &spec.resources;
    let some = |present: bool| usize::from(present);
    1 + some(spec.directory.is_some())
        + some(spec.stdin.is_some())
        + some(spec.stdout.is_some())
        + some(spec.stderr.is_some())
        + [
            r.nodes,
            r.tasks,
            r.cpus_per_task,
            r.gpus_per_node,
            r.gpus_per_task,
        ]
        .iter()
        .filter(|v| v.is_some())
        .count()
        + some(r.memory_per_node.is_some())
        + some(r.exclusive)
        + some(spec.walltime.is_some())
        + some(spec.queue.is_some())
        + some(spec.account.is_some())
        + some(spec.array.is_some())
        + some(spec.hold)
        + some(!spec.dependencies.is_empty())
        + spec.native.get("slurm").map_or(0, Vec::len)
}
