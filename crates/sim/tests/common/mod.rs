//! What every replay must satisfy, checked from its records alone (not from the engine's own
//! bookkeeping): sessions start after they arrive and on a node that is up, no node holds more
//! than its capacity at any instant, and every admitted session ends.

#![allow(dead_code)] // each test binary uses its own part

use std::collections::BTreeMap;

use corral_core::Slots;
use corral_sim::{Outcome, Trace};

/// Every way `outcome` breaks the rules, as sentences (empty: a valid schedule).
pub fn violations(trace: &Trace, outcome: &Outcome) -> Vec<String> {
    let mut found = Vec::new();
    // Per node: (instant, +1 start / -1 end, session).
    let mut changes: BTreeMap<usize, Vec<(i64, i8, usize)>> = BTreeMap::new();
    for (j, (s, job)) in outcome.sessions.iter().zip(&trace.jobs).enumerate() {
        if s.rejected.is_some() {
            if s.started.is_some() {
                found.push(format!("session {j} was rejected and started"));
            }
            continue;
        }
        let (Some(start), Some(end), Some(node)) = (s.started, s.ended, s.node) else {
            found.push(format!("session {j} was admitted and never ended"));
            continue;
        };
        if start < s.submitted {
            found.push(format!("session {j} started before it was submitted"));
        }
        if end.0 - start.0 != (job.duration_secs * 1000) as i64 {
            found.push(format!("session {j} did not run for its duration"));
        }
        let n = &outcome.nodes[node];
        if start < n.joined || n.terminated.is_some_and(|t| t < end) {
            found.push(format!("session {j} ran while node {} was not up", n.id));
        }
        let per_node = changes.entry(node).or_default();
        per_node.push((start.0, 1, j));
        per_node.push((end.0, -1, j));
    }
    for (node, mut list) in changes {
        // Ends before starts at the same instant: a session that ends frees its place at once.
        list.sort_by_key(|&(t, delta, j)| (t, delta, j));
        let capacity = &outcome.nodes[node].capacity;
        let mut held = Slots::new();
        for (t, delta, j) in list {
            let slots = &outcome.sessions[j].slots;
            if delta > 0 {
                held = held.checked_add(slots).expect("sums of requests fit u64");
                if !held.fits_in(capacity) {
                    found.push(format!(
                        "node {} holds {held} at {t} ms, over its capacity {capacity}",
                        outcome.nodes[node].id
                    ));
                }
            } else {
                held = held
                    .checked_sub(slots)
                    .expect("a session ends after it starts");
            }
        }
    }
    found
}

/// Sessions started out of submit order (pairs of trace indexes), for FIFO under `strict`.
pub fn out_of_order(outcome: &Outcome) -> Vec<(usize, usize)> {
    let mut started: Vec<(usize, &corral_sim::SessionRecord)> = outcome
        .sessions
        .iter()
        .enumerate()
        .filter(|(_, s)| s.started.is_some())
        .collect();
    started.sort_by_key(|(j, s)| (s.submitted, *j));
    started
        .windows(2)
        .filter(|w| w[1].1.started < w[0].1.started)
        .map(|w| (w[0].0, w[1].0))
        .collect()
}
