//! Passes that carry the agents' dense form from one to the next: told which agents changed,
//! they decide as a fresh pass; not told, the tests' builds stop at once.

mod common;

use common::snapshot;
use corral_core::{cycle, cycle_carrying, Carry, Slots};
use serde_json::json;

fn busy_agent_and_a_queue() -> corral_core::Snapshot {
    snapshot(json!({
        "group": {"policy": "fixed"},
        "agents": [
            {"id": "a1", "capacity": "cpu=8,gpu=2", "allocated": "cpu=8,gpu=2", "state": "alive"},
            {"id": "a2", "capacity": "cpu=4", "allocated": "cpu=4", "state": "alive"}
        ],
        "sessions": [{"id": "s1", "owner": "alice", "request": "cpu=2,gpu=1", "submitted_at": 1}]
    }))
}

#[test]
fn an_agent_freed_and_told_takes_the_queue_as_in_a_fresh_pass() {
    let mut s = busy_agent_and_a_queue();
    let mut carry = Carry::default();
    let first = cycle_carrying(&s, &mut carry);
    assert!(first.placements.is_empty(), "{:?}", first.placements);

    s.agents[0].allocated = Slots::new();
    carry.changed(&s.agents[0].id);
    let second = cycle_carrying(&s, &mut carry);
    assert_eq!(second, cycle(&s));
    assert_eq!(second.placements.len(), 1);
    assert_eq!(second.placements[0].agent.0, "a1");
    assert_eq!(second.placements[0].devices.len(), 1, "one of its two GPUs");
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "the carry was not told")]
fn a_change_the_carry_was_not_told_of_stops_a_test_build() {
    let mut s = busy_agent_and_a_queue();
    let mut carry = Carry::default();
    cycle_carrying(&s, &mut carry);
    s.agents[0].allocated = Slots::new();
    cycle_carrying(&s, &mut carry);
}
