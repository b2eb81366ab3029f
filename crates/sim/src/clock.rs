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
    scheduled: u64,
}

impl Clock {
    pub fn at(&mut self, when: Timestamp, event: Event) {
        self.queue.push(Reverse((when, self.scheduled, event)));
        self.scheduled += 1;
    }

    /// When the next event happens.
    pub fn next_time(&self) -> Option<Timestamp> {
        self.queue.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The next event, if it happens at `until` or before.
    pub fn pop_until(&mut self, until: Timestamp) -> Option<(Timestamp, Event)> {
        match self.queue.peek() {
            Some(Reverse((t, _, _))) if *t <= until => {
                self.queue.pop().map(|Reverse((t, _, e))| (t, e))
            }
            _ => None,
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
}
