//! Whether a live agent could hold an unmet session, and which agents that take no sessions now
//! could: what a session that no launch serves waits for.

use super::ScaleInput;
use crate::admission::Admission;
use crate::decisions::NoLaunch;
use crate::dense::fits;
use crate::model::AgentState;

/// Whether a live agent could ever hold an unmet session (its whole capacity, were it idle), one
/// check per class: a session only agents drained, marked or lost could hold waits for one of
/// them to come back, not for running sessions to end.
pub(super) struct LiveAgents {
    /// Built at the first question: most passes have no session without room.
    admission: Option<Admission>,
    per_class: Vec<Option<bool>>,
}

impl LiveAgents {
    pub(super) fn new(input: &ScaleInput) -> Self {
        LiveAgents {
            admission: None,
            per_class: vec![None; input.classes],
        }
    }

    /// For unmet session `k`.
    pub(super) fn could_hold(&mut self, input: &ScaleInput, k: usize) -> bool {
        let (need, class) = input.unmet[k];
        if let Some(known) = self.per_class[class] {
            return known;
        }
        let index = input.index;
        let admission = self.admission.get_or_insert_with(|| {
            let live = input
                .snapshot
                .agents
                .iter()
                .enumerate()
                .filter(|(_, a)| a.state == AgentState::Alive)
                .map(|(i, a)| input.dims.agent_capacity(i, a));
            Admission::new(index, live)
        });
        let holds = admission.check(index, need).is_ok();
        self.per_class[class] = Some(holds);
        holds
    }
}

/// Why an unmet session that no live agent and no template could hold waits: the agents that
/// could, which take no sessions now, named with their state (at most three, then a count).
pub(super) fn unavailable(input: &ScaleInput, k: usize) -> NoLaunch {
    const NAMED: usize = 3;
    let (need, class) = input.unmet[k];
    if let Some(Some(away)) = input.away.get(class) {
        return NoLaunch::Away {
            holders: away.clone(),
        };
    }
    let holders: Vec<String> = input
        .snapshot
        .agents
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            matches!(a.state, AgentState::Marked | AgentState::Lost)
                && fits(need, &input.dims.agent_capacity(*i, a))
        })
        .map(|(_, a)| {
            let state = match a.state {
                AgentState::Marked if a.updating.is_some() => "updating",
                AgentState::Marked if a.drained_by_hand => "drained",
                AgentState::Marked => "marked for scale-in",
                other => return format!("{} ({other})", a.id),
            };
            format!("{} ({state})", a.id)
        })
        .collect();
    let agents = match holders.len() {
        0 => "agents that take no sessions now".to_string(),
        1 => format!("agent {}", holders[0]),
        n if n <= NAMED => format!("agents {}", holders.join(", ")),
        n => format!(
            "agents {} and {} more",
            holders[..NAMED].join(", "),
            n - NAMED
        ),
    };
    NoLaunch::Unavailable { agents }
}
