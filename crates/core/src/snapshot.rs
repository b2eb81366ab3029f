//! A group's state at one instant, and the shares computed from it on demand.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::governor::LaunchLimit;

use crate::model::{
    Agent, AgentId, AgentState, Image, InFlight, ScalingGroup, Session, SessionState, Timestamp,
};
use crate::slots::Slots;

/// Everything one pass of the cycle reads about a group, read in one consistent read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub now: Timestamp,
    pub group: ScalingGroup,
    pub agents: Vec<Agent>,
    /// Pending sessions, and those holding capacity when fair share (DRF) needs them: agents'
    /// allocations already say what is taken.
    pub sessions: Vec<Session>,
    pub images: Vec<Image>,
    pub in_flight: Vec<InFlight>,
    /// When the policy last launched anything (for its cooldown).
    pub last_scale_out: Option<Timestamp>,
    /// Templates the provider may not be asked for freely now (backoff after failures, launch
    /// budget spent): how many instances of each the policy may still launch, and why.
    #[serde(default)]
    pub launch_limits: BTreeMap<String, LaunchLimit>,
    /// Per array with a limit (`%N`) and pending sessions here, by its id: how many of its
    /// sessions hold capacity now (scheduled or running), wherever they are (those holding
    /// capacity need not be in `sessions`, and the pass does not count those that are). An
    /// array not named holds none.
    #[serde(default)]
    pub array_holding: BTreeMap<String, u32>,
    /// Agents removed by hand within the retention: with the nodes the policy declares
    /// (`expected_nodes`), capacity that may come back, which a session may wait for.
    #[serde(default)]
    pub removed: Vec<crate::expected::Removed>,
}

impl Snapshot {
    /// Sessions waiting for a place, in snapshot order.
    pub fn pending(&self) -> impl Iterator<Item = &Session> {
        self.sessions
            .iter()
            .filter(|s| s.state == SessionState::Pending)
    }

    /// Free slots of every agent that takes new sessions (alive and unmarked).
    pub fn available_shares(&self) -> Vec<(&AgentId, Slots)> {
        self.agents
            .iter()
            .filter(|a| a.state == AgentState::Alive)
            .map(|a| (&a.id, a.available()))
            .collect()
    }

    /// The headroom the policy keeps free so that a few sessions start without scaling.
    pub fn minimum_shares(&self) -> &Slots {
        &self.group.policy.headroom
    }

    /// What one session needs: its request raised to its image's minimums.
    pub fn required_shares(&self, session: &Session) -> Slots {
        self.required_shares_of(session).into_owned()
    }

    /// [`Snapshot::required_shares`], borrowing the request when no image raises it (a pass
    /// reads thousands).
    pub fn required_shares_of<'a>(&'a self, session: &'a Session) -> Cow<'a, Slots> {
        let image = session.image.as_deref();
        match image.and_then(|name| self.images.iter().find(|i| i.name == name)) {
            Some(image) => Cow::Owned(session.request.max(&image.min_slots)),
            None => Cow::Borrowed(&session.request),
        }
    }

    /// What a request needs on the given image (an image the group does not know adds nothing).
    pub fn required_for(&self, request: &Slots, image: Option<&str>) -> Slots {
        match image.and_then(|name| self.images.iter().find(|i| i.name == name)) {
            Some(image) => request.max(&image.min_slots),
            None => request.clone(),
        }
    }
}
