//! What this manager keeps of each agent that syncs with it: the waker its waiting sync listens
//! to, and what an idle sync last read of it (its state, whether it holds sessions), so that the
//! next idle syncs read nothing. Whatever changes for an agent that its idle sync would answer
//! differently comes with a wake (a placement made here, or by another manager and told through
//! the database), and a wake forgets what was read. What is read is kept for half of
//! `lost_after` at most, so an agent marked lost, having been silent for `lost_after`, is always
//! read again when it comes back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral_store::Heard;
use tokio::sync::Notify;

/// Per agent, its waker and what was read of it.
#[derive(Default)]
pub struct AgentSlots(Mutex<HashMap<String, Slot>>);

#[derive(Default)]
struct Slot {
    waker: Arc<Notify>,
    read: Option<(Heard, Instant)>,
    /// Wakes so far: what was read before a wake is not kept.
    wakes: u64,
}

/// The wakes of an agent when a read of it began ([`AgentSlots::remember`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wakes(u64);

impl AgentSlots {
    /// What the agent's waiting sync listens to.
    pub fn waker(&self, agent: &str) -> Arc<Notify> {
        self.slots()
            .entry(agent.to_string())
            .or_default()
            .waker
            .clone()
    }

    /// Something changed for the agent: its waiting sync is answered now, and what was read of
    /// it is forgotten.
    pub fn wake(&self, agent: &str) {
        let mut slots = self.slots();
        Self::wake_slot(slots.entry(agent.to_string()).or_default());
    }

    /// [`AgentSlots::wake`], for an agent that synced with this manager only.
    pub fn wake_if_known(&self, agent: &str) {
        if let Some(slot) = self.slots().get_mut(agent) {
            Self::wake_slot(slot);
        }
    }

    /// What was read of the agent, if it is younger than `max_age`; else the wakes to give
    /// [`AgentSlots::remember`] with what is read now.
    pub fn remembered(&self, agent: &str, max_age: Duration) -> Result<Heard, Wakes> {
        let slots = self.slots();
        let Some(slot) = slots.get(agent) else {
            return Err(Wakes(0));
        };
        match &slot.read {
            Some((heard, at)) if at.elapsed() < max_age => Ok(heard.clone()),
            _ => Err(Wakes(slot.wakes)),
        }
    }

    /// Keeps what a read found, unless the agent was woken since the read began (`seen`).
    pub fn remember(&self, agent: &str, heard: Heard, seen: Wakes) {
        let mut slots = self.slots();
        let slot = slots.entry(agent.to_string()).or_default();
        if slot.wakes == seen.0 {
            slot.read = Some((heard, Instant::now()));
        }
    }

    fn wake_slot(slot: &mut Slot) {
        slot.wakes += 1;
        slot.read = None;
        slot.waker.notify_waiters();
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use corral_core::AgentState;

    use super::*;

    fn heard(holds: bool) -> Heard {
        Heard {
            state: AgentState::Alive,
            external: false,
            group: "g".into(),
            updating: false,
            holds,
        }
    }

    const AGE: Duration = Duration::from_secs(60);

    #[test]
    fn a_read_is_kept_until_the_agent_is_woken() {
        let slots = AgentSlots::default();
        let seen = slots.remembered("a1", AGE).unwrap_err();
        slots.remember("a1", heard(false), seen);
        assert_eq!(slots.remembered("a1", AGE), Ok(heard(false)));
        slots.wake("a1");
        let seen = slots.remembered("a1", AGE).unwrap_err();
        slots.remember("a1", heard(true), seen);
        assert_eq!(slots.remembered("a1", AGE), Ok(heard(true)));
        slots.wake_if_known("a1");
        assert!(slots.remembered("a1", AGE).is_err());
        // Another agent's wake changes nothing here.
        slots.remember("a1", heard(false), slots.remembered("a1", AGE).unwrap_err());
        slots.wake("a2");
        slots.wake_if_known("a3");
        assert_eq!(slots.remembered("a1", AGE), Ok(heard(false)));
    }

    #[test]
    fn a_read_that_a_wake_overtook_is_not_kept() {
        let slots = AgentSlots::default();
        slots.waker("a1");
        let seen = slots.remembered("a1", AGE).unwrap_err();
        // Placed on it while the read was under way: the read may not show it.
        slots.wake("a1");
        slots.remember("a1", heard(false), seen);
        assert!(slots.remembered("a1", AGE).is_err());
    }

    #[test]
    fn a_read_is_kept_for_its_age_only() {
        let slots = AgentSlots::default();
        let seen = slots.remembered("a1", AGE).unwrap_err();
        slots.remember("a1", heard(false), seen);
        assert!(slots.remembered("a1", Duration::ZERO).is_err());
    }

    #[tokio::test]
    async fn a_wake_answers_the_waiting_sync() {
        let slots = AgentSlots::default();
        let waker = slots.waker("a1");
        let woken = waker.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        slots.wake_if_known("a1");
        woken.await;
    }
}
