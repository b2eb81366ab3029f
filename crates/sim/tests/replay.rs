//! Replays through the real cycle: small traces whose outcome can be worked out by hand, and the
//! HPC2N log on the example groups (examples/simulate/).

mod common;

use std::path::PathBuf;

use corral_sim::{parse_csv, simulate, Report, SimConfig, Trace};

fn replay(trace: &Trace, config: &SimConfig) -> (corral_sim::Outcome, Report) {
    let outcome = simulate(trace, config, &mut |_| {}).expect("the replay finishes");
    let violations = common::violations(trace, &outcome);
    assert!(violations.is_empty(), "{violations:#?}");
    let report = Report::of("test", trace, config, &outcome);
    (outcome, report)
}

fn config(text: &str) -> SimConfig {
    SimConfig::parse(text, &[]).expect("a valid configuration")
}

const ONE_AGENT: &str = r#"
    [scheduler]
    head_of_line = "strict"

    [[agents]]
    slots = { cpu = 4 }
    price_per_hour = 2.0
"#;

#[test]
fn a_fixed_agent_runs_the_queue_in_order_and_sessions_wait_for_room() {
    let trace = parse_csv(
        "submit,duration,cpu\n0,100,4\n10,50,2\n20,50,2\n30,10,8\n",
        true,
    )
    .expect("valid CSV");
    let c = config(ONE_AGENT);
    let (outcome, report) = replay(&trace, &c);
    let started: Vec<Option<i64>> = outcome
        .sessions
        .iter()
        .map(|s| s.started.map(|t| t.0 / 1000))
        .collect();
    // Both 2-CPU sessions wait for the first to end at 100 s; cpu=8 never fits.
    assert_eq!(started, [Some(0), Some(100), Some(100), None]);
    assert_eq!(report.rejected, 1);
    let (reason, n) = report.rejections.iter().next().expect("one reason");
    assert_eq!(*n, 1);
    assert!(reason.contains("cpu=8 requested"), "{reason}");
    assert_eq!(report.finished, 3);
    assert_eq!(report.makespan_secs, 150);
    assert_eq!(report.wait_secs.max, 90.0);
    // 100 s of 4 CPUs, then 50 s of 4: all of the agent's 150 s.
    assert_eq!(report.utilisation["cpu"], 1.0);
    assert!(
        (report.cost - 2.0 * 150.0 / 3600.0).abs() < 1e-9,
        "{}",
        report.cost
    );
    assert_eq!(
        report.cost_lower_bound, None,
        "a group that starts with agents"
    );
    assert!(common::out_of_order(&outcome).is_empty());
}

/// Sessions of 0.6 hold 0.6 of each of two GPUs: 0.7 fits on neither until one ends, although
/// 0.8 is free in sum; the same on an agent launched from a template that lists its devices.
#[test]
fn fractions_of_gpus_are_counted_device_by_device() {
    let trace = parse_csv(
        "submit,duration,cpu,gpu\n0,100,1,0.6\n0,100,1,0.6\n10,10,1,0.7\n",
        true,
    )
    .expect("valid CSV");
    let fixed = config("[[agents]]\nslots = { cpu = 4, gpu = 2 }\n");
    let launched = config(
        r#"
        [policy]
        kind = "demand"
        max_nodes = 1

        [[templates]]
        name = "a100x2"
        slots = { cpu = 4 }
        max = 1
        devices = [{ model = "NVIDIA A100-SXM4-80GB", memory = "80GiB", count = 2 }]
        "#,
    );
    assert_eq!(
        launched.templates[0].slots.to_string(),
        "cpu=4,gpu=2,gpu.mem=160GiB"
    );
    for c in [fixed, launched] {
        let (outcome, _) = replay(&trace, &c);
        let started: Vec<i64> = outcome
            .sessions
            .iter()
            .map(|s| s.started.expect("every session runs").0 / 1000)
            .collect();
        let first = started[0];
        assert_eq!(started, [first, first, first + 100], "{c:?}");
    }
}

const DEMAND: &str = r#"
    [policy]
    kind = "demand"
    max_nodes = 4
    idle_wait_secs = 60
    batch_idle_ms = 1000
    batch_max_ms = 5000

    [[templates]]
    name = "small"
    slots = { cpu = 2 }
    price_per_hour = 1.0
    max = 4

    [[templates]]
    name = "large"
    slots = { cpu = 8 }
    price_per_hour = 3.0
    max = 4

    [provisioning]
    delay_secs = 30
"#;

#[test]
fn a_demand_group_launches_for_the_queue_and_lets_idle_agents_go() {
    let trace = parse_csv(
        "submit,duration,cpu\n0,600,2\n0,600,2\n0,600,2\n0,600,2\n",
        true,
    )
    .expect("CSV");
    let c = config(DEMAND);
    let (outcome, report) = replay(&trace, &c);
    // The burst closes after 1 s of quiet; the instance joins 30 s later.
    for s in &outcome.sessions {
        assert_eq!(s.started.map(|t| t.0), Some(31_000), "{s:?}");
    }
    // Four 2-CPU sessions: one large (3.0/h) is cheaper than four small (4.0/h).
    assert_eq!(report.scale_outs, 1);
    assert_eq!(
        report.node_hours_by_kind.keys().collect::<Vec<_>>(),
        ["large"]
    );
    // Marked 60 s after it went idle, terminated by the next pass (20 ms later); billed from
    // its launch to the last end (node time is counted up to the last end).
    assert_eq!(report.scale_ins, 1);
    let node = &outcome.nodes[0];
    assert_eq!(node.paid_from.0, 1_000);
    assert_eq!(node.terminated.map(|t| t.0), Some(631_000 + 60_000 + 20));
    assert!(
        (report.node_hours - 630.0 / 3600.0).abs() < 1e-9,
        "{}",
        report.node_hours
    );
    // The bound: 4 × 600 s of cpu=2 on the cheapest fit per CPU (large, 0.375 per CPU-hour).
    let bound = report.cost_lower_bound.expect("a group of templates only");
    assert!(
        (bound - 4.0 * 2.0 * 0.375 * 600.0 / 3600.0).abs() < 1e-6,
        "{bound}"
    );
    assert!(bound <= report.cost + 1e-9);
}

/// A pass runs when something happens to the group or a timer runs out: an agent idle for less
/// than the idle wait, which takes a session again, wakes no pass when that wait would have
/// ended.
#[test]
fn an_idle_wait_cut_short_by_a_session_wakes_no_pass() {
    let trace = parse_csv("submit,duration,cpu\n0,600,2\n650,100,2\n", true).expect("CSV");
    let (outcome, report) = replay(&trace, &config(DEMAND));
    let started: Vec<Option<i64>> = (outcome.sessions.iter())
        .map(|s| s.started.map(|t| t.0))
        .collect();
    assert_eq!(started, [Some(31_000), Some(650_000)]);
    assert_eq!(report.scale_ins, 1);
    assert_eq!(
        outcome.nodes[0].terminated.map(|t| t.0),
        Some(750_000 + 60_000 + 20)
    );
    // At 0 s (the burst's window opens), 1 s (launch), 31 s (join: the first session starts),
    // 61 s (the launch budget's window moves on), 631 s (it ends), 650 s (the second starts),
    // 750 s (it ends), 810 s (idle for 60 s: marked), 810.02 s (terminated) and 810.04 s (let
    // go). None at 91 s or 691 s, when the agent was busy.
    assert_eq!(outcome.passes, 10);
}

#[test]
fn refused_launches_back_off_and_are_retried_until_the_queue_runs() {
    let trace = parse_csv("submit,duration,cpu\n0,60,8\n", true).expect("CSV");
    let text = format!(
        "{DEMAND}\nfailure_rate = 0.9\nseed = 3\n[launch]\nbackoff_initial_secs = 10\nbackoff_max_secs = 40\n"
    );
    let c = config(&text);
    let (outcome, report) = replay(&trace, &c);
    assert!(report.launch_failures > 0, "{report:?}");
    assert_eq!(report.scale_outs, report.launch_failures + 1);
    assert_eq!(report.finished, 1);
    assert!(outcome.sessions[0].started.expect("ran").0 >= 31_000 + 10_000);
}

#[test]
fn the_same_trace_and_config_give_the_same_report() {
    let trace = parse_csv(
        "submit,duration,cpu,owner\n0,300,2,a\n5,100,8,b\n5,100,1,a\n400,50,2,c\n401,900,4,b\n",
        true,
    )
    .expect("CSV");
    let text = format!("{DEMAND}\nfailure_rate = 0.3\n");
    let c = config(&text);
    let runs: Vec<String> = (0..2)
        .map(|_| serde_json::to_string(&replay(&trace, &c).1).expect("JSON"))
        .collect();
    assert_eq!(runs[0], runs[1]);
}

fn hpc2n() -> Option<Trace> {
    let path = corral_testkit::shared_data("hpc2n.swf")?;
    Some(corral_sim::read(&path, corral_sim::Format::Swf, true).expect("the log reads"))
}

fn example(name: &str, overrides: &[(String, String)]) -> SimConfig {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/simulate")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("the example exists");
    SimConfig::parse(&text, overrides).expect("the example is valid")
}

#[test]
fn hpc2n_on_its_machine_is_a_valid_schedule_in_fifo_order_under_strict() {
    let Some(trace) = hpc2n() else { return };
    let strict = [(
        "scheduler.head_of_line".to_string(),
        "\"strict\"".to_string(),
    )];
    let c = example("hpc2n-fixed.toml", &strict);
    let (outcome, report) = replay(&trace, &c);
    assert_eq!(report.sessions, 3145);
    assert_eq!(
        report.rejected, 0,
        "the machine holds every job: {report:?}"
    );
    assert_eq!(report.finished, 3145);
    assert_eq!(common::out_of_order(&outcome), []);
    assert!(
        report.recorded_wait_secs.is_some(),
        "the log's own waits are reported"
    );
}

#[test]
fn hpc2n_on_demand_and_on_an_elastic_machine_costs_less_than_the_machine() {
    let Some(trace) = hpc2n() else { return };
    let fixed = example("hpc2n-fixed.toml", &[]);
    let demand = example("hpc2n-demand.toml", &[]);
    let (_, on_machine) = replay(&trace, &fixed);
    let (_, on_demand) = replay(&trace, &demand);
    assert_eq!(on_demand.finished, on_machine.finished);
    assert!(
        on_demand.cost < on_machine.cost,
        "{on_demand:?}\n{on_machine:?}"
    );
    let bound = on_demand.cost_lower_bound.expect("templates only");
    assert!(bound <= on_demand.cost, "{bound} > {}", on_demand.cost);
    assert!(on_demand.scale_outs > 0 && on_demand.scale_ins > 0);

    // The same machine switched off when idle: fewer node-hours, the same jobs finished.
    let (_, elastic) = replay(&trace, &example("hpc2n-elastic.toml", &[]));
    assert_eq!(elastic.finished, on_machine.finished);
    assert!(elastic.node_hours < on_machine.node_hours, "{elastic:?}");
    assert!(elastic.scale_ins > 0);
}

#[test]
fn a_head_that_needs_another_template_at_max_nodes_gets_it_once_the_idle_agent_goes() {
    // Found by the property test: the GPU head waited forever behind an idle CPU agent that
    // the group, at max_nodes, kept for (or kept bringing back for) the session held behind it.
    let trace = parse_csv(
        "submit,duration,cpu,gpu\n593,202,1,0\n705,1,1,1\n705,1,1,0\n",
        true,
    )
    .expect("CSV");
    let text = DEMAND
        .replace("max_nodes = 4", "max_nodes = 1")
        .replace("idle_wait_secs = 60", "idle_wait_secs = 0")
        .replace("slots = { cpu = 8 }", "slots = { cpu = 8, gpu = 2 }");
    let c = config(&format!("{text}\n[scheduler]\nhead_of_line = \"strict\"\n"));
    let (outcome, report) = replay(&trace, &c);
    assert_eq!(report.finished, 3);
    assert_eq!(common::out_of_order(&outcome), []);
}
