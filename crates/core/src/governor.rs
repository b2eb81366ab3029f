//! The launch governor: per template, exponential backoff after provider failures (reset by a
//! success) and a launch budget per window. It only remembers what the manager tells it and
//! answers, for a given instant, how many instances of each template the policy may ask for.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::model::Timestamp;

/// How a group's provider is driven: backoff, launch budget, provisioning timeout, reconciliation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct LaunchSettings {
    /// Backoff after a template's first failure; doubles with each further one.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub backoff_initial_secs: u64,
    /// Longest backoff (and the backoff after a fatal error).
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub backoff_max_secs: u64,
    /// Most instances of one template asked for per budget window.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub budget: u32,
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub budget_window_secs: u64,
    /// An instance that has not joined this long after its launch is terminated and counted as
    /// a failure of its template.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub max_provisioning_secs: u64,
    /// An instance carrying the group's tag that the manager does not know is terminated once
    /// it has been seen this long.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub orphan_grace_secs: u64,
    /// How often the provider's list is compared with what the manager knows.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub reconcile_secs: u64,
    /// Longest one provider call may take before it counts as a transient failure.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub call_timeout_secs: u64,
}

impl Default for LaunchSettings {
    fn default() -> Self {
        LaunchSettings {
            backoff_initial_secs: 10,
            backoff_max_secs: 600,
            budget: 20,
            budget_window_secs: 60,
            max_provisioning_secs: 600,
            orphan_grace_secs: 300,
            reconcile_secs: 30,
            call_timeout_secs: 120,
        }
    }
}

impl LaunchSettings {
    /// Every duration and the budget are positive, and the backoff can grow: `(field, why)`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let positive = [
            ("backoff_initial_secs", self.backoff_initial_secs),
            ("backoff_max_secs", self.backoff_max_secs),
            ("budget", u64::from(self.budget)),
            ("budget_window_secs", self.budget_window_secs),
            ("max_provisioning_secs", self.max_provisioning_secs),
            ("orphan_grace_secs", self.orphan_grace_secs),
            ("reconcile_secs", self.reconcile_secs),
            ("call_timeout_secs", self.call_timeout_secs),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err((field, "must be at least 1".into()));
            }
            if value > 365 * 24 * 3600 {
                return Err((field, "must be at most a year".into()));
            }
        }
        if self.backoff_max_secs < self.backoff_initial_secs {
            return Err((
                "backoff_max_secs",
                format!(
                    "must be at least backoff_initial_secs ({})",
                    self.backoff_initial_secs
                ),
            ));
        }
        Ok(())
    }

    /// The backoff after `failures` failures in a row (at least one).
    pub fn backoff_secs(&self, failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1).min(32);
        self.backoff_initial_secs
            .saturating_mul(1u64 << doublings)
            .min(self.backoff_max_secs)
    }
}

/// How many instances of a template the policy may ask for now, and why no more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LaunchLimit {
    pub allowed: u32,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
struct Health {
    /// Failures since the last success.
    failures: u32,
    blocked_until: Option<Timestamp>,
    last_error: String,
    /// Launches asked for in the current budget window: (when, how many), oldest first.
    recent: VecDeque<(Timestamp, u32)>,
}

/// Per template: failures, backoff, and launches in the budget window. Kept in the database
/// (as JSON) by the manager that owns the group, so that another owner goes on from it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Governor {
    templates: BTreeMap<String, Health>,
}

impl Governor {
    /// The templates the policy may not launch freely at `now`, with how many it may.
    pub fn limits(
        &self,
        settings: &LaunchSettings,
        now: Timestamp,
    ) -> BTreeMap<String, LaunchLimit> {
        let window_start = Timestamp(now.0 - (settings.budget_window_secs as i64) * 1000);
        let mut limits = BTreeMap::new();
        for (name, health) in &self.templates {
            if let Some(until) = health.blocked_until.filter(|&t| t > now) {
                let reason = format!(
                    "template {name} backs off for {} more after {} failure(s): {}",
                    crate::decisions::human_ms(now.ms_until(until)),
                    health.failures,
                    health.last_error
                );
                limits.insert(name.clone(), LaunchLimit { allowed: 0, reason });
                continue;
            }
            let used: u32 = health
                .recent
                .iter()
                .filter(|(at, _)| *at > window_start)
                .map(|(_, n)| n)
                .sum();
            if used > 0 {
                let allowed = settings.budget.saturating_sub(used);
                let reason = format!(
                    "template {name} launched {used} of its budget of {} per {} s",
                    settings.budget, settings.budget_window_secs
                );
                limits.insert(name.clone(), LaunchLimit { allowed, reason });
            }
        }
        limits
    }

    /// The next instant after `now` at which [`Governor::limits`] will allow more: a backoff
    /// ends, or a launch leaves the budget window. A pass then may launch what waits.
    pub fn next_release(&self, settings: &LaunchSettings, now: Timestamp) -> Option<Timestamp> {
        let window_ms = (settings.budget_window_secs as i64) * 1000;
        self.templates
            .values()
            .flat_map(|health| {
                let leaves = health
                    .recent
                    .iter()
                    .map(|(at, _)| Timestamp(at.0 + window_ms));
                health.blocked_until.into_iter().chain(leaves)
            })
            .filter(|&at| at > now)
            .min()
    }

    /// `count` instances of `template` were asked for at `now`.
    pub fn launched(
        &mut self,
        settings: &LaunchSettings,
        template: &str,
        count: u32,
        now: Timestamp,
    ) {
        let window_start = Timestamp(now.0 - (settings.budget_window_secs as i64) * 1000);
        let health = self.templates.entry(template.to_string()).or_default();
        while health
            .recent
            .front()
            .is_some_and(|(at, _)| *at <= window_start)
        {
            health.recent.pop_front();
        }
        health.recent.push_back((now, count));
    }

    /// The provider launched `template` (or one of its instances joined): its backoff resets.
    /// Returns whether there was one to reset.
    pub fn succeeded(&mut self, template: &str) -> bool {
        let Some(health) = self.templates.get_mut(template) else {
            return false;
        };
        let backed_off =
            health.failures > 0 || health.blocked_until.is_some() || !health.last_error.is_empty();
        health.failures = 0;
        health.blocked_until = None;
        health.last_error.clear();
        backed_off
    }

    /// A launch of `template` failed (or one of its instances never joined). Returns until when
    /// it backs off. A fatal failure backs off for the longest interval at once.
    pub fn failed(
        &mut self,
        settings: &LaunchSettings,
        template: &str,
        fatal: bool,
        error: &str,
        now: Timestamp,
    ) -> Timestamp {
        let health = self.templates.entry(template.to_string()).or_default();
        health.failures = health.failures.saturating_add(1);
        let secs = if fatal {
            settings.backoff_max_secs
        } else {
            settings.backoff_secs(health.failures)
        };
        let until = now.plus_secs(secs);
        health.blocked_until = Some(health.blocked_until.map_or(until, |t| t.max(until)));
        health.last_error = error.to_string();
        until
    }

    /// Failures since the last success, per template that has any.
    pub fn failures(&self) -> BTreeMap<&str, u32> {
        self.templates
            .iter()
            .filter(|(_, h)| h.failures > 0)
            .map(|(n, h)| (n.as_str(), h.failures))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp(secs * 1000)
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum_and_resets_after_a_success() {
        let s = LaunchSettings {
            backoff_initial_secs: 10,
            backoff_max_secs: 60,
            ..LaunchSettings::default()
        };
        let mut g = Governor::default();
        assert_eq!(g.failed(&s, "a", false, "no room", t(0)), t(10));
        assert_eq!(g.limits(&s, t(5))["a"].allowed, 0);
        assert!(g.limits(&s, t(5))["a"].reason.contains("no room"));
        assert!(
            g.limits(&s, t(10)).is_empty(),
            "free again once the backoff ends"
        );
        assert_eq!(g.failed(&s, "a", false, "no room", t(10)), t(30));
        assert_eq!(g.failed(&s, "a", false, "no room", t(30)), t(70));
        assert_eq!(
            g.failed(&s, "a", false, "no room", t(70)),
            t(130),
            "capped at 60 s"
        );
        assert_eq!(g.failures()["a"], 4);
        assert!(g.succeeded("a"), "a backoff was reset");
        assert!(g.failures().is_empty());
        assert!(!g.succeeded("a"), "nothing left to reset");
        assert_eq!(
            g.failed(&s, "a", false, "no room", t(200)),
            t(210),
            "starts over"
        );
        assert_eq!(
            g.failed(&s, "b", true, "bad AMI", t(0)),
            t(60),
            "fatal: longest at once"
        );
        assert!(g.limits(&s, t(0)).contains_key("b"));
    }

    #[test]
    fn the_next_release_is_the_first_backoff_or_budget_to_end() {
        let s = LaunchSettings {
            backoff_initial_secs: 10,
            budget: 5,
            budget_window_secs: 60,
            ..LaunchSettings::default()
        };
        let mut g = Governor::default();
        assert_eq!(g.next_release(&s, t(0)), None, "nothing held");
        g.failed(&s, "a", false, "no room", t(0));
        assert_eq!(g.next_release(&s, t(1)), Some(t(10)));
        g.launched(&s, "b", 5, t(5));
        assert_eq!(
            g.next_release(&s, t(6)),
            Some(t(10)),
            "the backoff ends first"
        );
        assert_eq!(
            g.next_release(&s, t(10)),
            Some(t(65)),
            "then b's launches leave"
        );
        assert_eq!(g.next_release(&s, t(65)), None);
    }

    #[test]
    fn the_budget_counts_launches_in_a_sliding_window() {
        let s = LaunchSettings {
            budget: 5,
            budget_window_secs: 60,
            ..LaunchSettings::default()
        };
        let mut g = Governor::default();
        assert!(g.limits(&s, t(0)).is_empty());
        g.launched(&s, "a", 3, t(0));
        g.launched(&s, "a", 2, t(30));
        assert_eq!(g.limits(&s, t(31))["a"].allowed, 0);
        assert_eq!(
            g.limits(&s, t(61))["a"].allowed,
            3,
            "the first 3 left the window"
        );
        assert!(g.limits(&s, t(91)).is_empty());
    }

    #[test]
    fn settings_are_validated() {
        assert!(LaunchSettings::default().validate().is_ok());
        let s = LaunchSettings {
            backoff_initial_secs: 100,
            backoff_max_secs: 10,
            ..LaunchSettings::default()
        };
        assert_eq!(s.validate().unwrap_err().0, "backoff_max_secs");
        assert_eq!(s.backoff_secs(40), 10);
    }
}
