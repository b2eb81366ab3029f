//! What one pass decides, each decision with the reason people read in events.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::model::{AgentId, SessionId, Timestamp};
use crate::slots::{Quantity, SlotName, Slots};

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Decisions {
    pub rejections: Vec<Rejection>,
    pub launches: Vec<Launch>,
    pub marks: Vec<AgentDecision>,
    pub unmarks: Vec<AgentDecision>,
    pub terminations: Vec<AgentDecision>,
    pub placements: Vec<Placement>,
    /// Every admitted session left pending, with why it waits.
    pub waiting: Vec<Waiting>,
    /// The demand (plus headroom) handed to the launch planner: what the launches serve.
    pub scale_out_demand: Slots,
    /// When a pass may decide otherwise although nothing else happens (a batching window or the
    /// cooldown ends): the control loop runs one then.
    pub recheck_at: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejection {
    pub session: SessionId,
    #[serde(serialize_with = "as_text")]
    pub reason: Infeasible,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Launch {
    pub template: String,
    pub count: u32,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentDecision {
    pub agent: AgentId,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub session: SessionId,
    pub agent: AgentId,
    /// The required shares the session takes on the agent.
    pub slots: Slots,
    /// The devices it takes there, by id.
    pub devices: Vec<crate::devices::DeviceGrant>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Waiting {
    pub session: SessionId,
    #[serde(serialize_with = "as_text")]
    pub reason: WaitReason,
}

/// Why a request can never run in its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Infeasible {
    /// No live agent and no launchable template at all.
    NoCapacity,
    /// Some slots exceed what any single agent or template offers.
    Exceeds(Vec<Excess>),
    /// Each slot fits somewhere, but no single agent or template holds all of them together.
    NoSingleFit { requested: Slots },
    /// The slots fit, but no agent or template has the devices asked for (their number, a
    /// device with that much free at once, or their model and memory).
    NoDevices {
        requested: Slots,
        /// What was asked of devices, in people's words.
        wanted: Vec<String>,
    },
    /// What it asks of devices is not a request devices can serve (`gpu=1.5`).
    BadDevices(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excess {
    pub slot: SlotName,
    pub requested: Quantity,
    pub largest: Quantity,
}

impl fmt::Display for Infeasible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Infeasible::NoCapacity => {
                f.write_str("the group has no agent and no launchable template")
            }
            Infeasible::Exceeds(excess) => {
                for (i, e) in excess.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    let requested = e.requested.display_for(&e.slot);
                    if e.largest == Quantity::ZERO {
                        // A slot nothing has: most often a typo (`cpus`, `gpus`).
                        write!(
                            f,
                            "{slot}={requested} requested; no agent or template of the group has a \"{slot}\" slot",
                            slot = e.slot
                        )?;
                    } else {
                        write!(
                            f,
                            "{slot}={requested} requested; the largest agent or template offers {slot}={}",
                            e.largest.display_for(&e.slot),
                            slot = e.slot
                        )?;
                    }
                }
                Ok(())
            }
            Infeasible::NoSingleFit { requested } => {
                write!(
                    f,
                    "{requested} requested; no single agent or template offers all of it at once"
                )
            }
            Infeasible::NoDevices { requested, wanted } => write!(
                f,
                "{requested} requested; no agent or template of the group has {}",
                wanted.join(" and ")
            ),
            Infeasible::BadDevices(why) => f.write_str(why),
        }
    }
}

/// Why an admitted session is still pending after a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// It fits an instance that was launched earlier and has not joined yet.
    InFlight { template: String },
    /// It fits an instance this pass launches.
    Launching { template: String },
    /// It would fit now, but a blocked session ahead of it holds the queue.
    HeldBehind { session: SessionId },
    /// No agent has room, and the policy does not launch for it now.
    NoRoom { because: NoLaunch },
    /// Its array's limit (`%max_running`) keeps it waiting: `running` of the array's sessions
    /// hold capacity after this pass (scheduled or running), and the others up to the limit
    /// are ahead of it in the queue. Nothing is launched for it.
    ArrayLimit {
        array: String,
        max_running: u32,
        running: u32,
    },
}

impl WaitReason {
    /// Whether the session waited for room this pass, so that the pass counts toward its
    /// `blocked_passes` (backfill's `skip_after`): not when it was held behind another session
    /// or kept waiting by its array's limit, which found it no agent to try.
    pub fn counts_as_blocked(&self) -> bool {
        !matches!(
            self,
            WaitReason::HeldBehind { .. } | WaitReason::ArrayLimit { .. }
        )
    }
}

/// Why the policy launches nothing for a session that has no room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoLaunch {
    /// The policy is `fixed`: it waits for running sessions to end.
    FixedPolicy,
    /// The policy launched recently: `left_ms` more of cooldown.
    Cooldown { left_ms: u64 },
    /// Sessions are still arriving: the batching window closes in `left_ms` at most, and the
    /// pass that closes it plans for the whole burst.
    Batching { left_ms: u64 },
    /// The group has `max_nodes` agents and instances.
    GroupAtMax { max_nodes: u32 },
    /// This pass launched `max_launches_per_pass` instances; the next one launches more.
    PassLimit { max_launches_per_pass: u32 },
    /// Every template that fits is at its own maximum.
    TemplatesAtMax,
    /// No template holds it: only agents that are busy now can.
    NoTemplate,
    /// Only agents that take no sessions now could hold it (no live one, no template): it waits
    /// for one of them to come back. `agents` names them with their state (`a1 (lost)`).
    Unavailable { agents: String },
    /// Nothing in the group now could hold it, but capacity that may come back could (agents
    /// removed within the retention, nodes the policy declares), described.
    Away { holders: String },
    /// The templates that fit are held back by the provider's backoff or launch budget.
    Held { reason: String },
    /// Room exists, but the session queue in front of it has not got there yet.
    Queue,
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::InFlight { template } => {
                write!(f, "waits for a {template} instance that is starting")
            }
            WaitReason::Launching { template } => write!(
                f,
                "waits for a new {template} instance (launched in this pass)"
            ),
            WaitReason::HeldBehind { session } => {
                write!(f, "held behind session {session} at the head of the queue")
            }
            WaitReason::NoRoom {
                because: NoLaunch::Away { holders },
            } => write!(f, "no agent now; {holders}"),
            WaitReason::NoRoom { because } => {
                f.write_str("no agent has room")?;
                match because {
                    NoLaunch::FixedPolicy => f.write_str(
                        "; the policy is fixed, so it waits for running sessions to end",
                    ),
                    NoLaunch::Cooldown { left_ms } => {
                        write!(
                            f,
                            "; scale-out cools down, next launch in {}",
                            human_ms(*left_ms)
                        )
                    }
                    NoLaunch::Batching { left_ms } => write!(
                        f,
                        "; sessions are still arriving, scale-out plans for all of them in {} \
                         at most",
                        human_ms(*left_ms)
                    ),
                    NoLaunch::GroupAtMax { max_nodes } => write!(
                        f,
                        "; the group is at max_nodes ({max_nodes}), so it waits for running \
                         sessions to end"
                    ),
                    NoLaunch::PassLimit {
                        max_launches_per_pass,
                    } => write!(
                        f,
                        "; this pass launched max_launches_per_pass ({max_launches_per_pass}), \
                         the next one launches more"
                    ),
                    NoLaunch::TemplatesAtMax => {
                        f.write_str("; every template that fits is at its maximum")
                    }
                    NoLaunch::NoTemplate => f.write_str(
                        "; no template holds it, so it waits for running sessions to end",
                    ),
                    NoLaunch::Unavailable { agents } => write!(
                        f,
                        "; only {agents} could hold it, so it waits for one of them to take \
                         sessions again"
                    ),
                    NoLaunch::Held { reason } => write!(f, "; {reason}"),
                    NoLaunch::Queue => f.write_str(" yet"),
                    // Written above, without "has room".
                    NoLaunch::Away { holders } => write!(f, "; {holders}"),
                }
            }
            WaitReason::ArrayLimit {
                array,
                max_running,
                running,
            } => match max_running.checked_sub(*running).filter(|&ahead| ahead > 0) {
                Some(ahead) => write!(
                    f,
                    "its array {array} has {running} running and {ahead} ahead of it in the \
                     queue, its limit (%{max_running})"
                ),
                None => write!(
                    f,
                    "its array {array} has {running} running, its limit (%{max_running})"
                ),
            },
        }
    }
}

/// A wait as people read it: `0.4 s`, `42 s`, `3 min 5 s`, `2 h 10 min`.
pub fn human_ms(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..10 => format!("{:.1} s", ms as f64 / 1000.0),
        10..120 => format!("{secs} s"),
        120..7200 => match secs % 60 {
            0 => format!("{} min", secs / 60),
            s => format!("{} min {s} s", secs / 60),
        },
        _ => match (secs / 60) % 60 {
            0 => format!("{} h", secs / 3600),
            m => format!("{} h {m} min", secs / 3600),
        },
    }
}

fn as_text<T: fmt::Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}
