//! Agents that update themselves to their group's target build, one idle agent at a time as
//! each falls idle: never while it runs anything.

use serde::{Deserialize, Serialize};

use crate::model::{Agent, AgentState, Timestamp};

/// A group's agent auto-update policy.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentUpdate {
    /// Off: no agent is asked to update.
    pub enabled: bool,
    /// An agent updates once it has held nothing this long.
    pub idle_wait_secs: u64,
    /// The version the group's agents are to run (an uploaded agent build); agents on any
    /// other version update to it, older or newer, so that a target set back rolls back.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Version>))]
    pub target: Option<String>,
}

impl Default for AgentUpdate {
    fn default() -> Self {
        AgentUpdate {
            enabled: false,
            idle_wait_secs: 60,
            target: None,
        }
    }
}

/// Whether `text` is a version as agent builds are named (it becomes a file name): 1-64
/// letters, digits, `.`, `_`, `-` or `+`, starting with a letter or digit.
pub fn is_version(text: &str) -> bool {
    (1..=64).contains(&text.len())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-+".contains(c))
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
}

/// The version `agent` is to update to at `now`, if any: the policy is on with a target; the
/// agent said which version it runs, and it is another; it is alive (not marked, lost or
/// draining), not external (its machine is its owner's), and idle for the wait; and its last
/// update to this target did not fail (`failed`: the target of its last failed update).
pub fn update_due<'a>(
    policy: &'a AgentUpdate,
    agent: &Agent,
    failed: Option<&str>,
    now: Timestamp,
) -> Option<&'a str> {
    let target = policy.target.as_deref().filter(|_| policy.enabled)?;
    let runs = agent.version.as_deref()?;
    let idle_long_enough = agent
        .idle_since
        .is_some_and(|t| t.plus_secs(policy.idle_wait_secs) <= now);
    (runs != target
        && failed != Some(target)
        && agent.state == AgentState::Alive
        && !agent.external
        && agent.is_idle()
        && idle_long_enough)
        .then_some(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slots::Slots;
    use crate::AgentId;

    fn agent(version: &str, idle_since: Option<i64>) -> Agent {
        Agent {
            id: AgentId("a1".into()),
            group: "g".into(),
            template: None,
            capacity: "cpu=1".parse().unwrap(),
            allocated: Slots::new(),
            state: AgentState::Alive,
            labels: Default::default(),
            external: false,
            drained_by_hand: false,
            idle_since: idle_since.map(Timestamp),
            devices: Vec::new(),
            version: Some(version.into()),
            platform: Some("linux-x86_64".into()),
            updating: None,
        }
    }

    fn on(target: &str) -> AgentUpdate {
        AgentUpdate {
            enabled: true,
            idle_wait_secs: 60,
            target: Some(target.into()),
        }
    }

    #[test]
    fn an_agent_updates_once_idle_for_the_wait_to_another_version() {
        let now = Timestamp(1_000_000);
        let idle_61s = agent("1.0.0", Some(now.0 - 61_000));
        assert_eq!(
            update_due(&on("1.1.0"), &idle_61s, None, now),
            Some("1.1.0")
        );
        // Back to an older version too: a target set back rolls back.
        assert_eq!(
            update_due(&on("0.9.0"), &idle_61s, None, now),
            Some("0.9.0")
        );
        assert_eq!(update_due(&on("1.0.0"), &idle_61s, None, now), None);
        let idle_59s = agent("1.0.0", Some(now.0 - 59_000));
        assert_eq!(update_due(&on("1.1.0"), &idle_59s, None, now), None);
        let busy = Agent {
            allocated: "cpu=1".parse().unwrap(),
            idle_since: None,
            ..idle_61s.clone()
        };
        assert_eq!(update_due(&on("1.1.0"), &busy, None, now), None);
    }

    #[test]
    fn off_failed_marked_external_or_silent_agents_are_left_alone() {
        let now = Timestamp(1_000_000);
        let idle = agent("1.0.0", Some(0));
        let off = AgentUpdate {
            enabled: false,
            ..on("1.1.0")
        };
        assert_eq!(update_due(&off, &idle, None, now), None);
        assert_eq!(update_due(&AgentUpdate::default(), &idle, None, now), None);
        // A failed target is not tried again; a new target is.
        assert_eq!(update_due(&on("1.1.0"), &idle, Some("1.1.0"), now), None);
        assert_eq!(
            update_due(&on("1.2.0"), &idle, Some("1.1.0"), now),
            Some("1.2.0")
        );
        for other in [
            Agent {
                state: AgentState::Marked,
                ..idle.clone()
            },
            Agent {
                external: true,
                ..idle.clone()
            },
            Agent {
                version: None,
                ..idle.clone()
            },
        ] {
            assert_eq!(update_due(&on("1.1.0"), &other, None, now), None);
        }
    }
}
