//! An agent cut off from its manager, and its sessions (docs/high-availability.md). With
//! [`OnDisconnect::Stop`] an agent that has not synced for `lost_after` stops its sessions
//! itself, within [`fence_grace`]; the manager gives them to other agents only once that stop is
//! surely over ([`release_after`]), so a session never runs in two places at once. With
//! [`OnDisconnect::Keep`] they run on, and stay the agent's until it is back or gone for good.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What an agent does with its sessions when it cannot reach its manager.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDisconnect {
    /// It stops them once it has not synced for `lost_after`; the manager then follows
    /// `on_agent_lost` (requeue or fail) once the stop is over.
    #[default]
    Stop,
    /// They run on; the manager leaves them with the agent until it comes back, or until it is
    /// gone for good (its instance gone, or the agent removed).
    Keep,
}

/// The longest an agent's stop may take when it fences itself: a third of `lost_after`, at most
/// 10 s (SIGTERM, then SIGKILL).
pub fn fence_grace(lost_after: Duration) -> Duration {
    (lost_after / 3).min(Duration::from_secs(10))
}

/// How long after an agent was last heard a manager may give its sessions to others (stop
/// mode): `lost_after` (the agent stops them then at the latest, as it counts from the start of
/// its last sync, which is before the manager heard it), its stop's grace, and a second for the
/// kill itself and the agent's watch.
pub fn release_after(lost_after: Duration) -> Duration {
    lost_after + fence_grace(lost_after) + Duration::from_secs(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_comes_after_the_agents_stop_is_over() {
        let s = Duration::from_secs;
        assert_eq!(fence_grace(s(30)), s(10));
        assert_eq!(release_after(s(30)), s(41));
        assert_eq!(fence_grace(s(3)), s(1));
        assert_eq!(release_after(s(3)), s(5));
        assert_eq!(fence_grace(s(600)), s(10), "never above 10 s");
        for secs in [2, 3, 10, 30, 300] {
            let lost_after = s(secs);
            assert!(release_after(lost_after) > lost_after + fence_grace(lost_after));
        }
    }
}
