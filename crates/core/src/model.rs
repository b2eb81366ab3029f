//! The domain: scaling groups and their policy, instance templates, agents, sessions, images.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::devices::{Device, DeviceConstraint, DeviceGrant, DeviceSet};
use crate::slots::Slots;

/// Milliseconds since the Unix epoch. The core never reads a clock: time is always an argument.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn plus_secs(self, secs: u64) -> Timestamp {
        self.plus_ms(secs.saturating_mul(1000))
    }

    pub fn plus_ms(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)))
    }

    /// Milliseconds from `self` to `later` (0 when `later` is not later).
    pub fn ms_until(self, later: Timestamp) -> u64 {
        u64::try_from(later.0.saturating_sub(self.0)).unwrap_or(0)
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_string())
            }
        }
    };
}

id_type!(
    /// An agent's identifier, unique within the manager.
    AgentId
);
id_type!(
    /// A session's identifier, unique within the manager.
    SessionId
);

/// How a group scales: the logic half of its scaling driver.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// Never launches or terminates: the on-premise default.
    #[default]
    Fixed,
    /// Launches for unmet demand and headroom, marks idle agents, terminates drained ones.
    Demand,
}

/// A group's scaling policy. Fields not given take these defaults.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScalingPolicy {
    pub kind: PolicyKind,
    /// Agents the policy never scales below.
    pub min_nodes: u32,
    /// Agents (alive, marked, lost, or launching) the group never exceeds.
    pub max_nodes: u32,
    /// Minimum shares: free capacity the group keeps so that a few sessions start at once.
    pub headroom: Slots,
    /// How long an agent stays idle before scale-in marks it.
    pub idle_wait_secs: u64,
    /// No new launch within this long after the last one (0: none; the batching window is what
    /// turns a burst into one launch).
    pub cooldown_secs: u64,
    /// Scale-out for new demand waits until no session has arrived for this long...
    #[cfg_attr(feature = "openapi", schema(maximum = 3_600_000))]
    pub batch_idle_ms: u64,
    /// ...or until the first session of the burst has waited this long, whichever comes first.
    #[cfg_attr(feature = "openapi", schema(maximum = 3_600_000))]
    pub batch_max_ms: u64,
    /// Cap on instances launched in one pass.
    pub max_launches_per_pass: u32,
    /// What becomes of the sessions of an agent that misses its heartbeats.
    pub on_agent_lost: OnAgentLost,
    /// Whether an agent cut off from the manager stops its sessions (and when the manager
    /// gives them to others).
    pub on_disconnect: crate::OnDisconnect,
    /// When running sessions are ended by the group rather than by themselves.
    pub termination: Termination,
    /// Whether agents from outside the provider may join, with a registered key.
    pub external: ExternalAgents,
    /// Whether idle agents update themselves to a target build.
    pub agent_update: crate::AgentUpdate,
    /// Whether agents keep the images they hold current with their registry.
    pub image_update: crate::ImageAutoUpdate,
    /// Nodes expected in the group though not joined now, by name, with their shapes: a session
    /// only they could hold waits for them instead of being refused (model or memory
    /// constraints on devices are not met by a declared node, which gives only counts).
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::ExpectedNodes))]
    pub expected_nodes: std::collections::BTreeMap<String, Slots>,
}

/// Agents that no provider of the group launched: they join by proving they hold a key
/// registered for the group, up to `limit` at once. The policy never marks or terminates them,
/// and they do not count toward `max_nodes`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExternalAgents {
    /// Off: no external agent joins, and those in the group are told to leave.
    pub enabled: bool,
    /// External agents taking part (alive or marked) at most.
    pub limit: u32,
}

impl Default for ExternalAgents {
    fn default() -> Self {
        ExternalAgents {
            enabled: false,
            limit: 10,
        }
    }
}

/// When the group ends running sessions: interactive ones left idle, and any past a lifetime.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Termination {
    pub mode: TerminationMode,
    /// With `idle`: an interactive session nobody used for this long is ended.
    pub idle_timeout_secs: u64,
    /// Any running session is ended after this long, whatever its type; no session may ask
    /// for a longer time limit.
    pub max_lifetime_secs: Option<u64>,
    /// The time limit of a session that gives none (`--time`): its agent stops it this long
    /// after it started. None: no limit but `max_lifetime_secs`.
    pub default_time_limit_secs: Option<u64>,
    /// A session placed on an agent whose inputs have not all been uploaded this long after
    /// its placement fails, so it stops holding the capacity it was given.
    pub input_wait_secs: u64,
}

impl Default for Termination {
    fn default() -> Self {
        Termination {
            mode: TerminationMode::Persistent,
            idle_timeout_secs: 3600,
            max_lifetime_secs: None,
            default_time_limit_secs: None,
            input_wait_secs: 900,
        }
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminationMode {
    /// Sessions run until they end or are cancelled.
    #[default]
    Persistent,
    /// Interactive sessions with no activity (API use, log reads, output reads) for
    /// `idle_timeout_secs` are ended. Batch sessions end on their own.
    Idle,
}

impl Termination {
    /// Why a running session should end now, if it should: `started` and `active` are when it
    /// started and was last used.
    pub fn ends(
        &self,
        kind: SessionType,
        started: Timestamp,
        active: Timestamp,
        now: Timestamp,
    ) -> Option<String> {
        if let Some(max) = self.max_lifetime_secs {
            if started.plus_secs(max) <= now {
                return Some(format!("ran for its maximum lifetime of {max} s"));
            }
        }
        let idle = self.mode == TerminationMode::Idle && kind == SessionType::Interactive;
        (idle && active.plus_secs(self.idle_timeout_secs) <= now)
            .then(|| format!("idle for {} s", self.idle_timeout_secs))
    }

    /// A session's time limit: `asked`, else the default, no more than the maximum lifetime nor
    /// `cap`. Asking for more is refused; a default above the maximum is cut to it (the
    /// maximum ends the session anyway).
    pub fn time_limit(&self, asked: Option<u64>, cap: u64) -> Result<Option<u64>, TimeLimitError> {
        let most = self.max_lifetime_secs.unwrap_or(cap).min(cap);
        match asked.or(self.default_time_limit_secs) {
            Some(0) => Err(TimeLimitError::Zero),
            Some(limit) if asked.is_some() && limit > most => {
                Err(TimeLimitError::TooLong { limit, most })
            }
            limit => Ok(limit.map(|l| l.min(most))),
        }
    }

    /// Whether a session placed at `placed` whose inputs are still missing has waited too long.
    pub fn inputs_overdue(&self, placed: Timestamp, now: Timestamp) -> bool {
        placed.plus_secs(self.input_wait_secs) <= now
    }
}

/// Why a session's time limit is refused ([`Termination::time_limit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeLimitError {
    Zero,
    TooLong { limit: u64, most: u64 },
}

/// What becomes of the sessions of a lost agent.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnAgentLost {
    /// Back to the queue, to run again elsewhere.
    #[default]
    Requeue,
    /// Failed, with the reason.
    Fail,
}

impl Default for ScalingPolicy {
    fn default() -> Self {
        ScalingPolicy {
            kind: PolicyKind::Fixed,
            min_nodes: 0,
            max_nodes: 100,
            headroom: Slots::new(),
            idle_wait_secs: 600,
            cooldown_secs: 0,
            batch_idle_ms: 1000,
            batch_max_ms: 10_000,
            max_launches_per_pass: 1000,
            on_agent_lost: OnAgentLost::Requeue,
            on_disconnect: crate::OnDisconnect::Stop,
            termination: Termination::default(),
            external: ExternalAgents::default(),
            agent_update: crate::AgentUpdate::default(),
            image_update: crate::ImageAutoUpdate::default(),
            expected_nodes: Default::default(),
        }
    }
}

/// The order in which pending sessions are considered.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sequencer {
    /// Oldest first.
    #[default]
    Fifo,
    /// Newest first.
    Lifo,
    /// Highest priority first, oldest first within a priority.
    Priority,
    /// The owner with the smallest dominant share first (dominant resource fairness).
    Drf,
}

/// Where a session goes among the agents it fits on.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementStrategy {
    /// Concentrated: the fullest agent that fits, so that whole agents stay free for scale-in.
    #[default]
    Binpack,
    /// Dispersed: the emptiest agent, so that sessions interfere least.
    Spread,
}

/// What a blocked session at the head of the queue does to those behind it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadOfLine {
    /// Nothing behind a blocked session is placed.
    Strict,
    /// Sessions behind a blocked one are placed once it has been blocked for `skip_after` passes.
    #[default]
    Backfill,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    pub sequencer: Sequencer,
    pub placement: PlacementStrategy,
    pub head_of_line: HeadOfLine,
    /// With backfill: passes a blocked session holds back those behind it (0: skip at once).
    pub skip_after: u32,
}

impl SchedulerConfig {
    /// Whether a session that found no room, blocked for `blocked_passes` passes so far, holds
    /// back the sessions behind it.
    pub fn holds_queue(&self, blocked_passes: u32) -> bool {
        match self.head_of_line {
            HeadOfLine::Strict => true,
            HeadOfLine::Backfill => blocked_passes < self.skip_after,
        }
    }
}

/// What a scaling driver can launch.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceTemplate {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Name))]
    pub name: String,
    pub slots: Slots,
    /// Price per hour, in the operator's currency.
    #[serde(alias = "price", default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub price_per_hour: f64,
    /// Most instances of this template at once.
    #[serde(default)]
    pub max: u32,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The devices each instance brings, one by one (a kind given only as a number in `slots`
    /// is that many whole devices of an unknown model).
    #[serde(default)]
    pub devices: Vec<DeviceSet>,
}

/// A named pool of agents, its policy, its templates and its scheduler.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingGroup {
    pub name: String,
    pub policy: ScalingPolicy,
    pub scheduler: SchedulerConfig,
    pub templates: Vec<InstanceTemplate>,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentState {
    /// Takes new sessions.
    #[default]
    Alive,
    /// Chosen for scale-in (or drained by hand): takes nothing new, is terminated once empty.
    Marked,
    /// Missed its heartbeats.
    Lost,
    Terminated,
}

/// As the API spells it: `alive`, `marked`, `lost`, `terminated`.
impl fmt::Display for AgentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AgentState::Alive => "alive",
            AgentState::Marked => "marked",
            AgentState::Lost => "lost",
            AgentState::Terminated => "terminated",
        })
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    pub id: AgentId,
    #[serde(default)]
    pub group: String,
    /// The template it was launched from; `None` for agents that joined by hand.
    #[serde(default)]
    pub template: Option<String>,
    pub capacity: Slots,
    #[serde(default)]
    pub allocated: Slots,
    #[serde(default)]
    pub state: AgentState,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Joined by itself with its own key: the provider cannot terminate it.
    #[serde(default)]
    pub external: bool,
    /// Marked by an operator (drain) or by the agent itself (a sync with `draining`): the policy
    /// never unmarks it.
    #[serde(default)]
    pub drained_by_hand: bool,
    /// When it last became idle (nothing allocated); `None` while busy.
    #[serde(default)]
    pub idle_since: Option<Timestamp>,
    /// Its devices one by one, with what sessions hold of each (a kind given only as a number
    /// in `capacity` is that many whole devices of an unknown model).
    #[serde(default)]
    pub devices: Vec<Device>,
    /// The version of Corral it runs and the platform it runs on (`linux-x86_64`), as it said
    /// when it joined; `None` from an agent that did not say.
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub platform: Option<String>,
    /// Marked to update itself to this version: the policy neither unmarks nor terminates it.
    #[serde(default)]
    pub updating: Option<String>,
}

impl Agent {
    /// Free capacity; an over-allocated agent (a peer's bad report) has none.
    pub fn available(&self) -> Slots {
        self.capacity
            .checked_sub(&self.allocated)
            .unwrap_or_default()
    }

    pub fn is_idle(&self) -> bool {
        self.allocated.is_empty()
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionType {
    #[default]
    Interactive,
    Batch,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    #[default]
    Pending,
    /// Placed on an agent, not yet started.
    Scheduled,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Rejected,
}

impl SessionState {
    /// Holds capacity on an agent.
    pub fn holds_capacity(self) -> bool {
        matches!(self, SessionState::Scheduled | SessionState::Running)
    }

    /// Ended: it will not change again.
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            SessionState::Pending | SessionState::Scheduled | SessionState::Running
        )
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    pub id: SessionId,
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub owner: String,
    /// Higher runs first under the priority sequencer.
    #[serde(default)]
    pub priority: i32,
    pub request: Slots,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default, rename = "type")]
    pub kind: SessionType,
    #[serde(default)]
    pub submitted_at: Timestamp,
    #[serde(default)]
    pub state: SessionState,
    /// Where it runs, once placed.
    #[serde(default)]
    pub agent: Option<AgentId>,
    /// Passes it has waited at the head of the queue (for backfill's `skip_after`).
    #[serde(default)]
    pub blocked_passes: u32,
    /// Which devices of a kind it accepts (model, least memory).
    #[serde(default)]
    pub constraints: Vec<DeviceConstraint>,
    /// The devices it holds, once placed.
    #[serde(default)]
    pub devices: Vec<DeviceGrant>,
    /// The array it is one of, if any, with the array's limit (`%N`): the pass places no more of
    /// an array's sessions than its limit lets hold capacity at once.
    #[serde(default)]
    pub array: Option<crate::arrays::ArrayMember>,
}

/// A container image and the least it needs to run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Image {
    pub name: String,
    #[serde(default)]
    pub min_slots: Slots,
}

/// Instances asked of the provider that have not joined yet: they count as capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InFlight {
    pub template: String,
    pub count: u32,
    #[serde(default)]
    pub since: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_limit_is_the_asked_one_else_the_default_within_the_maximum() {
        let t = Termination {
            max_lifetime_secs: Some(3600),
            default_time_limit_secs: Some(7200),
            ..Termination::default()
        };
        assert_eq!(t.time_limit(Some(60), 100_000), Ok(Some(60)));
        assert_eq!(
            t.time_limit(None, 100_000),
            Ok(Some(3600)),
            "a default cut to the maximum"
        );
        assert_eq!(
            t.time_limit(Some(7200), 100_000),
            Err(TimeLimitError::TooLong {
                limit: 7200,
                most: 3600
            })
        );
        assert_eq!(t.time_limit(Some(0), 100_000), Err(TimeLimitError::Zero));
        assert_eq!(Termination::default().time_limit(None, 100), Ok(None));
        assert_eq!(
            Termination::default().time_limit(Some(101), 100),
            Err(TimeLimitError::TooLong {
                limit: 101,
                most: 100
            })
        );
    }

    #[test]
    fn termination_ends_idle_interactive_sessions_and_any_past_their_lifetime() {
        let idle = Termination {
            mode: TerminationMode::Idle,
            idle_timeout_secs: 60,
            max_lifetime_secs: Some(3600),
            ..Termination::default()
        };
        let t = |s: i64| Timestamp(s * 1000);
        assert_eq!(
            idle.ends(SessionType::Interactive, t(0), t(10), t(69)),
            None
        );
        assert_eq!(
            idle.ends(SessionType::Interactive, t(0), t(10), t(70)),
            Some("idle for 60 s".into())
        );
        assert_eq!(
            idle.ends(SessionType::Batch, t(0), t(10), t(70)),
            None,
            "batch sessions end on their own"
        );
        assert_eq!(
            idle.ends(SessionType::Batch, t(0), t(3000), t(3600)),
            Some("ran for its maximum lifetime of 3600 s".into())
        );
        let persistent = Termination::default();
        assert_eq!(
            persistent.ends(SessionType::Interactive, t(0), t(0), t(1_000_000)),
            None
        );
    }
}
