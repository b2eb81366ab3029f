//! The discrete-event clock: what happens next, in time order, and in the order it was
//! scheduled among events of the same instant (so a replay is deterministic).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use corral_core::Timestamp;

/// Something that happens at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Event {
    /// The trace's job (index into the trace) is submitted.
    Arrive(usize),
    /// The session (index into the trace) ends on its agent.
    Finish(usize),
    /// A launched instance (by its number) joins as an agent.
    Join(u64),
    /// The provider refused a launch (the instance's number).
    LaunchFailed(u64),
    /// Nothing happens, but a pass may decide otherwise now (a batching window closes, a
    /// backoff ends, the launch budget's window moves on).
    Wake,
    /// The agent of the node (index into the nodes) has been idle since `since` for the idle
    /// wait, if it still is.
    IdleWait { node: usize, since: Timestamp },
}

#[derive(Debug, Default)]
pub struct Clock {
    queue: BinaryHeap<Reverse<(Timestamp, u64, Event)>>,
    /// The events known before the replay starts (the trace's arrivals), sorted, and the next
    /// of them: kept out of the heap, which would otherwise hold the whole trace and make
    /// every event cost a walk down a tree of that size.
    known: Vec<(Timestamp, u64, Event)>,
    next_known: usize,
    scheduled: u64,
}

impl Clock {
    /// A clock with `events` scheduled, in this order.
    pub fn starting_with(events: impl IntoIterator<Item = (Timestamp, Event)>) -> Self {
        let mut known: Vec<(Timestamp, u64, Event)> = (events.into_iter().enumerate())
            .map(|(i, (t, e))| (t, i as u64, e))
            .collect();
        known.sort_unstable_by_key(|&(t, i, _)| (t, i));
        Clock {
            scheduled: known.len() as u64,
            known,
            ..Clock::default()
        }
    }

    pub fn at(&mut self, when: Timestamp, event: Event) {
        self.queue.push(Reverse((when, self.scheduled, event)));
        self.scheduled += 1;
    }

    /// The next event: from the known ones or the heap, whichever comes first (in time, then
    /// in the order scheduled).
    fn next(&self) -> Option<(Timestamp, u64, bool)> {
        let known = (self.known.get(self.next_known)).map(|&(t, i, _)| (t, i, true));
        let queued = (self.queue.peek()).map(|Reverse((t, i, _))| (*t, *i, false));
        match (known, queued) {
            (Some(k), Some(q)) => Some(k.min(q)),
            (k, q) => k.or(q),
        }
    }

    /// When the next event happens.
    pub fn next_time(&self) -> Option<Timestamp> {
        self.next().map(|(t, _, _)| t)
    }

    /// The next event, if it happens at `until` or before.
    pub fn pop_until(&mut self, until: Timestamp) -> Option<(Timestamp, Event)> {
        match self.next()? {
            (t, _, _) if t > until => None,
            (t, _, true) => {
                let event = self.known[self.next_known].2;
                self.next_known += 1;
                Some((t, event))
            }
            (_, _, false) => self.queue.pop().map(|Reverse((t, _, e))| (t, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_in_time_order_then_in_the_order_scheduled() {
        let mut c = Clock::default();
        c.at(Timestamp(20), Event::Wake);
        c.at(Timestamp(10), Event::Finish(2));
        c.at(Timestamp(10), Event::Arrive(1));
        assert_eq!(c.next_time(), Some(Timestamp(10)));
        assert_eq!(
            c.pop_until(Timestamp(10)),
            Some((Timestamp(10), Event::Finish(2)))
        );
        assert_eq!(
            c.pop_until(Timestamp(10)),
            Some((Timestamp(10), Event::Arrive(1)))
        );
        assert_eq!(c.pop_until(Timestamp(19)), None);
        assert_eq!(
            c.pop_until(Timestamp(20)),
            Some((Timestamp(20), Event::Wake))
        );
        assert_eq!(c.next_time(), None);
    }

    #[test]
    fn known_events_merge_with_scheduled_ones_in_the_same_order() {
        let mut c = Clock::starting_with([
            (Timestamp(10), Event::Arrive(0)),
            (Timestamp(5), Event::Arrive(1)),
            (Timestamp(10), Event::Arrive(2)),
        ]);
        c.at(Timestamp(10), Event::Finish(7));
        c.at(Timestamp(1), Event::Wake);
        let mut order = Vec::new();
        while let Some(e) = c.pop_until(Timestamp(100)) {
            order.push(e);
        }
        let t = Timestamp;
        assert_eq!(
            order,
            [
                (t(1), Event::Wake),
                (t(5), Event::Arrive(1)),
                (t(10), Event::Arrive(0)),
                (t(10), Event::Arrive(2)),
                (t(10), Event::Finish(7)),
            ]
        );
    }
}
