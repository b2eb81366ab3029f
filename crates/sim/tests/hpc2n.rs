//! The SWF reader on a real archive log: the first jobs of HPC2N's "Seth" cluster, read from
//! the shared traces' folder (never copied into the project; `corral_testkit::shared_data`).

use corral_core::Quantity;
use corral_sim::{read, Format};

/// Job lines in the file (its README says 3,171 jobs, but one of the 3,171 lines after the
/// header is a blank last line).
const JOB_LINES: usize = 3170;

#[test]
fn hpc2n_trace_reads_whole() {
    let Some(path) = corral_testkit::shared_data("hpc2n.swf") else {
        return;
    };
    let format = Format::from_path(&path).expect("a .swf file");
    let trace = read(&path, format, true).expect("every line of the archive log reads");

    assert!(trace.malformed.is_empty(), "{:?}", trace.malformed);
    assert_eq!(
        trace.jobs.len() + trace.skipped.cancelled + trace.skipped.no_run_time,
        JOB_LINES
    );
    // The 25 jobs without a run time have status -1, not 5 (cancelled).
    assert_eq!(trace.skipped.no_run_time, 25);
    assert_eq!(trace.skipped.cancelled, 0);

    // The header counts 240 nodes (the machine had 120 of 2 CPUs each; the log counts CPUs).
    assert_eq!(trace.header.max_nodes, Some(240));
    assert_eq!(trace.header.max_procs, Some(240));
    assert_eq!(trace.header.fields["Version"], "2.2");
    assert_eq!(trace.header.fields["Partition"], "1 DEFAULT\n2 ALL");

    let one_cpu = Quantity::from_units(1).expect("small");
    let all_cpus = Quantity::from_units(240).expect("small");
    for job in &trace.jobs {
        let cpu = job.request.get("cpu");
        assert!(
            (one_cpu..=all_cpus).contains(&cpu),
            "job {} asks for cpu={cpu}",
            job.id
        );
        assert!(job.duration_secs > 0, "job {}", job.id);
        assert!(job.owner.starts_with('u'), "job {}: {}", job.id, job.owner);
    }
    assert!(
        trace
            .jobs
            .windows(2)
            .all(|pair| (pair[0].submit_secs, pair[0].id) <= (pair[1].submit_secs, pair[1].id)),
        "jobs are sorted by submit time"
    );

    let job = |id: u64| {
        trace
            .jobs
            .iter()
            .find(|job| job.id == id)
            .unwrap_or_else(|| panic!("job {id} is in the trace"))
    };
    // 16 processors with 819200 KB each.
    assert_eq!(job(184).request.to_string(), "cpu=16,mem=12800MiB");
    // Allocated 18 processors where 16 were requested: what it held counts.
    assert_eq!(job(1725).request.to_string(), "cpu=18");
    // A fractional average CPU time (552.21) in an otherwise ordinary line.
    assert_eq!(job(12).duration_secs, 553);
    assert_eq!(job(12).recorded_wait_secs, Some(5));
    assert_eq!(job(12).owner, "u4");
}
