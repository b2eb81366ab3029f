//! Invariants over random small traces and groups: the schedule never over-allocates a node,
//! every admitted session ends, FIFO order holds under `strict`, and a replay is deterministic.

mod common;

use proptest::prelude::*;

use corral_sim::{parse_csv, simulate, Report, SimConfig};

/// A trace of up to 30 jobs, some too large for any node (rejected), some with GPUs.
fn trace_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (0u64..2000, 1u64..900, 1u64..=10, 0u64..=2, 0usize..3),
        1..30,
    )
    .prop_map(|jobs| {
        let mut text = String::from("submit,duration,cpu,gpu,owner\n");
        for (submit, duration, cpu, gpu, owner) in jobs {
            text.push_str(&format!("{submit},{duration},{cpu},{gpu},u{owner}\n"));
        }
        text
    })
}

/// A fixed group of a few agents or a demand group of two templates, under any scheduler.
fn config_text() -> impl Strategy<Value = String> {
    let scheduler = (
        prop::sample::select(vec!["fifo", "lifo", "drf", "priority"]),
        prop::sample::select(vec!["strict", "backfill"]),
        prop::sample::select(vec!["binpack", "spread"]),
        0u32..3,
    )
        .prop_map(|(sequencer, hol, placement, skip)| {
            format!(
                "[scheduler]\nsequencer = \"{sequencer}\"\nhead_of_line = \"{hol}\"\n\
                 placement = \"{placement}\"\nskip_after = {skip}\n"
            )
        });
    let fixed = (1u32..4, 2u64..9).prop_map(|(count, cpu)| {
        format!("[[agents]]\ncount = {count}\nslots = {{ cpu = {cpu}, gpu = 1 }}\n")
    });
    let demand = (1u32..6, 0u64..300, prop::sample::select(vec![0.0, 0.3]), 0u64..120).prop_map(
        |(max_nodes, idle, failure_rate, delay)| {
            format!(
                "[policy]\nkind = \"demand\"\nmax_nodes = {max_nodes}\nidle_wait_secs = {idle}\n\
                 [[templates]]\nname = \"cpu\"\nslots = {{ cpu = 4 }}\nprice_per_hour = 1.0\nmax = 3\n\
                 [[templates]]\nname = \"gpu\"\nslots = {{ cpu = 8, gpu = 2 }}\nprice_per_hour = 4.0\nmax = 2\n\
                 [provisioning]\ndelay_secs = {delay}\nfailure_rate = {failure_rate}\n"
            )
        },
    );
    (scheduler, prop_oneof![fixed, demand]).prop_map(|(s, g)| format!("{g}\n{s}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn replays_are_valid_complete_and_deterministic(trace in trace_text(), group in config_text()) {
        let trace = parse_csv(&trace, true).expect("generated CSV is valid");
        let config = SimConfig::parse(&group, &[]).expect("generated config is valid");
        let outcome = simulate(&trace, &config, &mut |_| {}).expect("the replay finishes");
        let violations = common::violations(&trace, &outcome);
        prop_assert!(violations.is_empty(), "{:#?}", violations);
        let report = Report::of("p", &trace, &config, &outcome);
        prop_assert_eq!(report.unfinished, 0);
        prop_assert_eq!(report.finished + report.rejected, trace.jobs.len());
        if group.contains("sequencer = \"fifo\"") && group.contains("head_of_line = \"strict\"") {
            prop_assert_eq!(common::out_of_order(&outcome), vec![]);
        }
        let again = simulate(&trace, &config, &mut |_| {}).expect("the replay finishes");
        let report_again = Report::of("p", &trace, &config, &again);
        prop_assert_eq!(
            serde_json::to_string(&report).expect("JSON"),
            serde_json::to_string(&report_again).expect("JSON")
        );
        if let Some(bound) = report.cost_lower_bound {
            prop_assert!(bound <= report.cost + 1e-9, "bound {} above cost {}", bound, report.cost);
        }
    }
}
