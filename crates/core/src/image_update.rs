//! Images that stay current by themselves: the agents of a group with the policy on ask the
//! registry, every interval, which digest each image they hold names now, pull a new one in
//! the background, and start new sessions on it; running sessions keep theirs.

use serde::{Deserialize, Serialize};

/// A group's image auto-update policy.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImageAutoUpdate {
    /// Off: agents pull nothing by themselves.
    pub enabled: bool,
    /// How often each agent asks the registry about each image it holds.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 604_800))]
    pub interval_secs: u64,
}

/// The longest interval (a week).
pub const MAX_INTERVAL_SECS: u64 = 604_800;

impl Default for ImageAutoUpdate {
    fn default() -> Self {
        ImageAutoUpdate {
            enabled: false,
            interval_secs: 300,
        }
    }
}

/// How long after a check an agent checks again, `failures` checks in a row having failed
/// (the registry did not answer or refused): the interval, doubled per failure up to 32 times
/// it, so an unreachable registry is asked ever less often but still within hours.
pub fn next_check_secs(interval_secs: u64, failures: u32) -> u64 {
    interval_secs.max(1).saturating_mul(1 << failures.min(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_to_thirty_two_intervals() {
        assert_eq!(next_check_secs(60, 0), 60);
        assert_eq!(next_check_secs(60, 1), 120);
        assert_eq!(next_check_secs(60, 3), 480);
        assert_eq!(next_check_secs(60, 5), 1920);
        assert_eq!(next_check_secs(60, 40), 1920);
        assert_eq!(next_check_secs(0, 0), 1);
        assert_eq!(next_check_secs(u64::MAX, 2), u64::MAX);
    }
}
