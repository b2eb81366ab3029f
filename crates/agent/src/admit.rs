//! The agent's own check of a placement before it starts a session: the devices the manager
//! granted must be its own and have room beside what its other sessions hold. A conflict with
//! sessions it is stopping passes once they end; any other is refused, and the manager puts
//! the session back in the queue.

use std::collections::HashSet;

use corral_core::grants::{check_grants, with_stand_ins};
use corral_core::{Device, DeviceGrant, SlotName, Slots};

/// What the agent does with a session placed on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    Start,
    /// Wait: sessions it stops hold the devices.
    Wait,
    /// Refuse, saying why.
    Refuse(String),
}

/// The devices the agent joined with: its list and, for kinds given only as a number, the
/// capacity the manager makes stand-ins of.
#[derive(Debug, Clone, Default)]
pub struct OwnDevices {
    pub capacity: Slots,
    pub devices: Vec<Device>,
}

impl OwnDevices {
    /// Whether to start `grants` beside `held` (session id and grants, of those it runs or
    /// waits to start), `stopping` the sessions it was told to stop.
    pub fn admit<'a>(
        &self,
        grants: &[DeviceGrant],
        held: &[(&'a str, &'a [DeviceGrant])],
        stopping: &HashSet<String>,
    ) -> Admit {
        if grants.is_empty() {
            return Admit::Start;
        }
        let kinds: Vec<&SlotName> = grants
            .iter()
            .chain(held.iter().flat_map(|(_, g)| g.iter()))
            .map(|g| &g.kind)
            .collect();
        let devices = with_stand_ins(&self.devices, &self.capacity, kinds);
        match check_grants(&devices, held.iter().copied(), grants) {
            Ok(()) => Admit::Start,
            Err(c)
                if !c.holders().is_empty() && c.holders().iter().all(|h| stopping.contains(h)) =>
            {
                Admit::Wait
            }
            Err(c) => Admit::Refuse(c.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_core::Quantity;

    fn grant(id: &str, share: u64) -> DeviceGrant {
        DeviceGrant {
            id: id.into(),
            kind: SlotName::new("gpu").unwrap(),
            share: Quantity::from_milli(share),
            memory: Quantity::ZERO,
        }
    }

    fn two_gpus() -> OwnDevices {
        OwnDevices {
            capacity: "gpu=2".parse().unwrap(),
            devices: Vec::new(),
        }
    }

    #[test]
    fn a_grant_that_fits_beside_what_is_held_starts() {
        let a = [grant("gpu0", 600)];
        let held = [("a", &a[..])];
        let own = two_gpus();
        assert_eq!(
            own.admit(&[grant("gpu0", 400)], &held, &HashSet::new()),
            Admit::Start
        );
        assert_eq!(
            own.admit(&[grant("gpu1", 1000)], &held, &HashSet::new()),
            Admit::Start
        );
    }

    #[test]
    fn a_grant_over_a_running_session_is_refused_naming_it() {
        let a = [grant("gpu0", 600)];
        let held = [("a", &a[..])];
        let Admit::Refuse(why) = two_gpus().admit(&[grant("gpu0", 500)], &held, &HashSet::new())
        else {
            panic!("not refused");
        };
        assert!(
            why.contains("\"gpu0\"") && why.contains("session(s) a"),
            "{why}"
        );
    }

    #[test]
    fn a_grant_over_a_stopping_session_waits() {
        let a = [grant("gpu0", 600)];
        let held = [("a", &a[..])];
        let stopping = HashSet::from(["a".to_string()]);
        assert_eq!(
            two_gpus().admit(&[grant("gpu0", 500)], &held, &stopping),
            Admit::Wait
        );
    }

    #[test]
    fn a_device_it_does_not_have_is_refused() {
        let Admit::Refuse(why) = two_gpus().admit(&[grant("gpu2", 1000)], &[], &HashSet::new())
        else {
            panic!("not refused");
        };
        assert!(why.contains("not one of this agent's devices"), "{why}");
    }
}
