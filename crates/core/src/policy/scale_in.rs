//! Scale-in: agents idle past the idle wait marked, marked agents terminated once empty.

use super::headroom::Headroom;
use super::{AgentAction, ScaleInput};
use crate::model::{Agent, AgentState};
use crate::slots::Key;
use crate::snapshot::Snapshot;

/// Marks agents idle past the idle wait, longest idle first, while the `keep` nodes counted stay
/// above `min_nodes` and the free capacity left keeps the headroom.
pub(super) fn mark_idle(
    input: &ScaleInput,
    mut keep: u32,
    headroom: &mut Headroom,
) -> Vec<AgentAction> {
    let s = input.snapshot;
    let policy = &s.group.policy;
    let mut idle: Vec<usize> = (0..s.agents.len())
        .filter(|&a| {
            let agent = &s.agents[a];
            agent.state == AgentState::Alive
                && !agent.external
                && !input.used[a]
                && agent.is_idle()
                && agent
                    .idle_since
                    .is_some_and(|t| t.plus_secs(policy.idle_wait_secs) <= s.now)
        })
        .collect();
    idle.sort_by_key(|&a| (s.agents[a].idle_since, &s.agents[a].id));
    let mut marks = Vec::new();
    for a in idle {
        if keep <= policy.min_nodes {
            break;
        }
        let mut without = headroom.free.clone();
        for (w, f) in without.iter_mut().zip(input.free[a].iter()) {
            *w = w.saturating_sub(*f);
        }
        if headroom.target.iter().zip(&without).any(|(h, w)| w < h) {
            continue;
        }
        headroom.free = without;
        keep -= 1;
        marks.push(AgentAction::new(
            a,
            format!("idle for more than {} s", policy.idle_wait_secs),
        ));
    }
    marks
}

/// Marked agents this pass did not unmark that hold nothing: no session, no allocation.
pub(super) fn terminate_marked_empty(s: &Snapshot, unmarked: &[bool]) -> Vec<AgentAction> {
    let candidate = |(a, agent): &(usize, &Agent)| {
        agent.state == AgentState::Marked
            && !unmarked[*a]
            && !agent.external
            && agent.updating.is_none()
            && agent.is_idle()
    };
    // Most passes have no marked agent: the sessions are read only when one may go, and
    // matched against the few that may (by id, in order).
    let mut candidates: Vec<(Key, usize)> = (s.agents.iter().enumerate())
        .filter(candidate)
        .map(|(a, agent)| (Key(&agent.id.0), a))
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    candidates.sort_unstable();
    let mut busy = vec![false; candidates.len()];
    for x in s.sessions.iter().filter(|x| x.state.holds_capacity()) {
        let on = x.agent.as_ref().map(|a| Key(&a.0));
        if let Some(k) = on.and_then(|on| candidates.binary_search_by(|c| c.0.cmp(&on)).ok()) {
            busy[k] = true;
        }
    }
    let mut empty: Vec<usize> = (candidates.iter().zip(&busy))
        .filter(|(_, &b)| !b)
        .map(|(&(_, a), _)| a)
        .collect();
    // In the agents' order, as before the sort.
    empty.sort_unstable();
    empty
        .into_iter()
        .map(|a| AgentAction::new(a, "marked and empty"))
        .collect()
}
