//! `corral simulate` as an operator runs it: the example group and trace (examples/simulate/),
//! JSON for scripts, a chart, side-by-side runs, and clear errors for bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/simulate")
}

fn corral(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_corral"))
        .arg("simulate")
        .args(args)
        .current_dir(examples())
        .output()
        .expect("corral runs")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("UTF-8")
}

fn failed(out: &Output) -> String {
    assert!(!out.status.success(), "it should fail");
    String::from_utf8(out.stderr.clone()).expect("UTF-8")
}

#[test]
fn a_replay_reports_json_for_scripts_and_draws_its_chart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let svg = dir.path().join("ml.svg");
    let out = corral(&[
        "--trace",
        "sessions.csv",
        "--config",
        "ml-cloud.toml",
        "-o",
        "json",
        "--plot",
        svg.to_str().expect("UTF-8 path"),
    ]);
    let report: serde_json::Value = serde_json::from_str(&ok(&out)).expect("JSON");
    assert_eq!(report["config"], "ml-cloud");
    assert_eq!(report["sessions"], 243);
    assert_eq!(report["finished"], 243);
    assert!(report["cost"].as_f64().expect("a cost") > 0.0);
    assert!(report["scale_outs"].as_u64().expect("a count") > 0);
    let bound = report["cost_lower_bound"].as_f64().expect("a bound");
    assert!(bound > 0.0 && bound <= report["cost"].as_f64().expect("a cost"));
    // Standard error is piped: no progress bar.
    assert!(!String::from_utf8_lossy(&out.stderr).contains('#'));
    let chart = std::fs::read_to_string(&svg).expect("the chart is written");
    assert!(chart.starts_with("<svg"), "{}", &chart[..80]);
    for text in ["ml-cloud", "gpu-4", "pending"] {
        assert!(chart.contains(text), "the chart shows {text}");
    }
}

#[test]
fn sweeps_and_comparisons_run_side_by_side() {
    let out = corral(&[
        "--trace",
        "sessions.csv",
        "--config",
        "ml-cloud.toml",
        "--sweep",
        "provisioning.delay_secs=30,600",
        "-o",
        "json",
    ]);
    let runs: Vec<serde_json::Value> = serde_json::from_str(&ok(&out)).expect("JSON");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["config"], "provisioning.delay_secs=30");
    assert_eq!(runs[1]["config"], "provisioning.delay_secs=600");
    let wait = |r: &serde_json::Value| r["wait_secs"]["mean"].as_f64().expect("a mean");
    assert!(
        wait(&runs[0]) < wait(&runs[1]),
        "slower boots, longer waits"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let fixed = dir.path().join("fixed.toml");
    std::fs::write(
        &fixed,
        "[[agents]]\ncount = 8\nslots = { cpu = 64, mem = \"512GiB\", gpu = 8 }\n",
    )
    .expect("written");
    let table = ok(&corral(&[
        "--trace",
        "sessions.csv",
        "--compare",
        "ml-cloud.toml",
        fixed.to_str().expect("UTF-8 path"),
    ]));
    let header = table.lines().next().expect("a header");
    assert!(
        header.contains("ml-cloud") && header.contains("fixed"),
        "{header}"
    );
    assert!(table.lines().any(|l| l.starts_with("wait ")), "{table}");
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("written");
    path.to_str().expect("UTF-8 path").to_string()
}

#[test]
fn bad_input_is_refused_naming_what_is_wrong() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write(dir.path(), "g.toml", "[[agents]]\nslots = \"cpu=4\"\n");
    let trace = write(
        dir.path(),
        "t.csv",
        "submit,duration,cpu\n0,10,1\nsoon,10,1\n",
    );

    let err = failed(&corral(&[
        "--trace", &trace, "--config", &config, "--strict",
    ]));
    assert!(err.contains("line 3"), "{err}");

    // Without --strict the line is skipped and counted.
    let out = corral(&["--trace", &trace, "--config", &config, "-o", "json"]);
    let report: serde_json::Value = serde_json::from_str(&ok(&out)).expect("JSON");
    assert_eq!(report["malformed"], 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3"));

    let typo = write(
        dir.path(),
        "typo.toml",
        "[policy]\nidle_wait = 5\n[[agents]]\nslots = \"cpu=4\"\n",
    );
    let err = failed(&corral(&["--trace", &trace, "--config", &typo]));
    assert!(
        err.contains("typo.toml") && err.contains("idle_wait"),
        "{err}"
    );

    let err = failed(&corral(&[
        "--trace",
        &trace,
        "--config",
        &config,
        "--sweep",
        "policy.kind",
    ]));
    assert!(err.contains("KEY=V1,V2"), "{err}");

    let no_ext = write(dir.path(), "trace.txt", "submit,duration,cpu\n0,10,1\n");
    let err = failed(&corral(&["--trace", &no_ext, "--config", &config]));
    assert!(err.contains("--format"), "{err}");
    // Every line malformed: nothing to replay is an error, not an empty report.
    let broken = write(
        dir.path(),
        "broken.csv",
        "submit,duration,cpu\nsoon,10,1\nlater,x,1\n",
    );
    let err = failed(&corral(&["--trace", &broken, "--config", &config]));
    assert!(
        err.contains("no job could be read: 2 malformed line(s), the first: line 2"),
        "{err}"
    );
}

/// Issue 51 item 10: archive logs with more than SWF's 18 fields are read by their first 18,
/// said once; --plot draws one chart per run of --compare.
#[test]
fn wide_swf_logs_are_read_and_comparisons_are_plotted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write(dir.path(), "g.toml", "[[agents]]\nslots = \"cpu=4\"\n");
    let other = write(
        dir.path(),
        "h.toml",
        "[[agents]]\ncount = 2\nslots = \"cpu=4\"\n",
    );
    let job = |id: u32| {
        format!(
            "{id} {} 0 60 2 -1 -1 2 -1 -1 1 1 -1 -1 -1 -1 -1 -1 99 98",
            id * 10
        )
    };
    let trace = write(dir.path(), "wide.swf", &[job(1), job(2), job(3)].join("\n"));
    let plot = dir.path().join("run.svg");
    let out = corral(&[
        "--trace",
        &trace,
        "--compare",
        &config,
        &other,
        "--plot",
        plot.to_str().unwrap(),
    ]);
    ok(&out);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        said.matches("3 line(s) have more than the 18 fields of SWF: their first 18 were read")
            .count(),
        1,
        "{said}"
    );
    for name in ["run-g.svg", "run-h.svg"] {
        let chart = std::fs::read_to_string(dir.path().join(name)).expect(name);
        assert!(chart.starts_with("<svg"), "{name}");
    }
}
