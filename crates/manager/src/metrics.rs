//! `GET /metrics`: the manager in Prometheus's text format (0.0.4), through `prometheus-client`.
//!
//! Counters and histograms are counted where things happen (a pass, a provider call, an HTTP
//! request); the gauges of what exists (sessions, agents, slots, instances) are read from the
//! store when scraped, so every manager on one database answers the same. Labels are bounded:
//! groups, templates, slots, states, routes; never a session's or an agent's id.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use corral_core::AgentState;
use corral_store::{Store, StoreError};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    pub group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub group: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SlotLabels {
    pub group: String,
    pub slot: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub group: String,
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PassLabels {
    pub group: String,
    /// `applied`, `conflict` (the apply lost a race; retried) or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectionLabels {
    pub group: String,
    /// `no_capacity`, `exceeds` or `no_single_fit`.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TemplateLabels {
    pub group: String,
    pub template: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaunchFailureLabels {
    pub group: String,
    pub template: String,
    /// `fatal` (the longest backoff at once) or `retryable`.
    pub class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderCallLabels {
    pub provider: String,
    /// `launch`, `list`, `terminate` or `templates`.
    pub call: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    /// The route as the API documents it (`/api/v1/sessions/{id}`), `unmatched` for others.
    pub route: String,
    pub status: u16,
}

type Timings<L> = Family<L, Histogram, fn() -> Histogram>;
type Amounts<L> = Family<L, Gauge<f64, AtomicU64>>;

/// From half a millisecond to about 16 s.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// A family of histograms in seconds.
fn timings<L: Clone + std::hash::Hash + Eq>() -> Timings<L> {
    Family::new_with_constructor(seconds as fn() -> Histogram)
}

/// The manager's metrics.
pub struct Metrics {
    registry: Registry,
    /// Serialises scrapes: each resets the gauges it reads from the store.
    scraping: tokio::sync::Mutex<()>,
    sessions: Family<StateLabels, Gauge>,
    agents: Family<StateLabels, Gauge>,
    capacity: Amounts<SlotLabels>,
    allocated: Amounts<SlotLabels>,
    free: Amounts<SlotLabels>,
    instances: Family<PhaseLabels, Gauge>,
    pub passes: Timings<PassLabels>,
    pub placements: Family<GroupLabels, Counter>,
    pub rejections: Family<RejectionLabels, Counter>,
    pub launches: Family<TemplateLabels, Counter>,
    pub launch_failures: Family<LaunchFailureLabels, Counter>,
    pub marks: Family<GroupLabels, Counter>,
    pub terminations: Family<GroupLabels, Counter>,
    pub store_conflicts: Family<GroupLabels, Counter>,
    pub store_applies: Timings<GroupLabels>,
    pub provider_calls: Timings<ProviderCallLabels>,
    pub http_requests: Timings<HttpLabels>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut m = Metrics {
            registry: Registry::with_prefix("corral"),
            scraping: Default::default(),
            sessions: Default::default(),
            agents: Default::default(),
            capacity: Default::default(),
            allocated: Default::default(),
            free: Default::default(),
            instances: Default::default(),
            passes: timings(),
            placements: Default::default(),
            rejections: Default::default(),
            launches: Default::default(),
            launch_failures: Default::default(),
            marks: Default::default(),
            terminations: Default::default(),
            store_conflicts: Default::default(),
            store_applies: timings(),
            provider_calls: timings(),
            http_requests: timings(),
        };
        let r = &mut m.registry;
        r.register(
            "sessions",
            "Sessions per group and state",
            m.sessions.clone(),
        );
        r.register("agents", "Agents per group and state", m.agents.clone());
        r.register(
            "slots_capacity",
            "What the group's alive and marked agents offer, per slot (cpu in cores, mem in bytes)",
            m.capacity.clone(),
        );
        r.register(
            "slots_allocated",
            "What sessions hold on the group's alive and marked agents, per slot",
            m.allocated.clone(),
        );
        r.register(
            "slots_free",
            "Capacity less allocation on the group's alive and marked agents, per slot",
            m.free.clone(),
        );
        r.register(
            "instances",
            "Instances of the group's provider per phase (ended ones until they are pruned)",
            m.instances.clone(),
        );
        r.register(
            "pass_duration_seconds",
            "Passes of the control loop (snapshot, cycle, apply) by outcome",
            m.passes.clone(),
        );
        r.register(
            "placements",
            "Sessions placed on agents",
            m.placements.clone(),
        );
        r.register(
            "rejections",
            "Sessions refused as no agent or template could ever hold them, by reason",
            m.rejections.clone(),
        );
        r.register(
            "launches",
            "Instances the policy decided to launch, per template",
            m.launches.clone(),
        );
        r.register(
            "launch_failures",
            "Failed launches (or instances whose agent never joined), per template and class",
            m.launch_failures.clone(),
        );
        r.register("marks", "Agents marked for scale-in", m.marks.clone());
        r.register(
            "terminations",
            "Agents let go by the policy",
            m.terminations.clone(),
        );
        r.register(
            "store_conflicts",
            "Passes whose apply lost a race with another writer (then retried)",
            m.store_conflicts.clone(),
        );
        r.register(
            "store_apply_duration_seconds",
            "The transaction that applies a pass's decisions",
            m.store_applies.clone(),
        );
        r.register(
            "provider_call_duration_seconds",
            "Calls to a group's provider",
            m.provider_calls.clone(),
        );
        r.register(
            "http_request_duration_seconds",
            "API requests by route and status (an agent's sync is a long poll: it lasts up to its heartbeat)",
            m.http_requests.clone(),
        );
        m
    }
}

impl Metrics {
    /// The text a scrape answers: the gauges read from `store` now, then every metric.
    pub async fn scrape(&self, store: &Store) -> Result<String, StoreError> {
        let _one_at_a_time = self.scraping.lock().await;
        self.read_gauges(store).await?;
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        Ok(text)
    }

    async fn read_gauges(&self, store: &Store) -> Result<(), StoreError> {
        let counts = store.count_sessions().await?;
        let agents = store.list_agents(None).await?;
        let instances = store.count_instances().await?;
        self.sessions.clear();
        for (group, state, count) in counts {
            let labels = StateLabels { group, state };
            self.sessions.get_or_create(&labels).set(count);
        }
        self.agents.clear();
        // Per group and slot, thousandths offered and held.
        let mut offered: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
        for a in &agents {
            let labels = StateLabels {
                group: a.group.clone(),
                state: word(&a.state),
            };
            self.agents.get_or_create(&labels).inc();
            if matches!(a.state, AgentState::Alive | AgentState::Marked) {
                for (slot, total) in a.capacity.iter() {
                    let entry = offered.entry((&a.group, slot.as_str())).or_default();
                    entry.0 = entry.0.saturating_add(total.milli());
                    entry.1 = entry
                        .1
                        .saturating_add(a.allocated.get(slot.as_str()).milli());
                }
            }
        }
        for family in [&self.capacity, &self.allocated, &self.free] {
            family.clear();
        }
        for ((group, slot), (total, held)) in offered {
            let labels = SlotLabels {
                group: group.to_string(),
                slot: slot.to_string(),
            };
            self.capacity.get_or_create(&labels).set(units(total));
            self.allocated.get_or_create(&labels).set(units(held));
            self.free
                .get_or_create(&labels)
                .set(units(total.saturating_sub(held)));
        }
        self.instances.clear();
        for (group, phase, count) in instances {
            let labels = PhaseLabels { group, phase };
            self.instances.get_or_create(&labels).set(count);
        }
        Ok(())
    }
}

/// Thousandths of a slot's unit as the unit (cores, bytes, devices).
fn units(milli: u64) -> f64 {
    milli as f64 / 1000.0
}

/// The API's word for an enum value (`pending`, `alive`).
fn word(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "unknown".into(),
    }
}
