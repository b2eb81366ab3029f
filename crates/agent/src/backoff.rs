//! Waits between tries: doubling up to a cap, each with a random part, so that agents cut off
//! together (a manager restart) do not come back in step; the waits the agent uses.

use std::time::Duration;

/// Waits before joining again after the manager refused a sync: doubling, up to the cap.
pub(crate) const FIRST_REJOIN_WAIT: Duration = Duration::from_millis(500);
pub(crate) const MAX_REJOIN_WAIT: Duration = Duration::from_secs(60);
/// Waits before trying again after the manager could not be reached.
pub(crate) const FIRST_RETRY_WAIT: Duration = Duration::from_millis(200);
pub(crate) const MAX_JOIN_RETRY_WAIT: Duration = Duration::from_secs(10);

/// The waits [`backoff`] gives.
pub(crate) type Waits = std::iter::Chain<backon::ExponentialBackoff, std::iter::Repeat<Duration>>;

/// Waits between tries, without end: doubling from `first` up to `cap`, each plus a random
/// part of itself, so that agents cut off together (a manager restart) do not come back in step.
pub(crate) fn backoff(first: Duration, cap: Duration) -> Waits {
    use backon::BackoffBuilder;
    let waits = backon::ExponentialBuilder::new()
        .with_jitter()
        .with_min_delay(first)
        .with_max_delay(cap)
        .without_max_times()
        .build();
    waits.chain(std::iter::repeat(cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_cap_and_are_spread() {
        let first = Duration::from_secs(1);
        let cap = Duration::from_secs(8);
        // Each wait is its step of the doubling plus a random part of that step.
        let waits: Vec<Duration> = backoff(first, cap).take(6).collect();
        for (wait, step) in waits.iter().zip([1, 2, 4, 8, 8, 8]) {
            let step = Duration::from_secs(step);
            assert!(*wait >= step && *wait <= step * 2, "{waits:?}");
        }
        // Agents refused together do not come back in step.
        let firsts: std::collections::BTreeSet<Duration> =
            (0..50).filter_map(|_| backoff(first, cap).next()).collect();
        assert!(firsts.len() > 10, "{firsts:?}");
    }
}
