//! Scheduling: a sequencer orders pending sessions, placement finds each an agent.
//!
//! Free capacity is indexed per slot (ordered sets keyed by free amount), so finding an agent is a
//! range walk rather than a scan of every agent; identical requests share one equivalence class,
//! and a class that found no room once in a pass is not searched again (capacity only shrinks
//! during a pass).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::ops::RangeBounds;
use std::sync::Arc;

use crate::dense::{self, fits, Rows, Vector};
use crate::ledger::{DeviceLayout, Grant, Ledger};
use crate::model::{PlacementStrategy, SchedulerConfig, Sequencer, Session};
use crate::slots::{Key, Share};

/// One key of the pending queue's order: a session field, and which way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKey {
    /// Higher priority first.
    PriorityDesc,
    /// Older first.
    SubmittedAt,
    /// Newer first.
    SubmittedAtDesc,
    /// Ties broken by id.
    Id,
}

/// The order a sequencer serves pending sessions in, as keys (DRF: oldest first, before its fair
/// share reorders them). The one statement of that rule: [`sequence`] sorts by it, and the store
/// reads the head of a long queue in it, so that a pass sees the sessions its sequencer serves
/// first.
pub fn queue_order(sequencer: Sequencer) -> &'static [QueueKey] {
    use QueueKey::*;
    match sequencer {
        Sequencer::Fifo | Sequencer::Drf => &[SubmittedAt, Id],
        Sequencer::Lifo => &[SubmittedAtDesc, Id],
        Sequencer::Priority => &[PriorityDesc, SubmittedAt, Id],
    }
}

/// Most pending sessions one pass reads: bounds a pass's time (the core places 100,000 in well
/// under a second) however long the queue grows. The store reads the head of the queue, in
/// [`queue_order`], up to this many; the simulator does the same.
pub const MAX_PENDING_PER_PASS: usize = 20_000;

/// Compares two sessions by `keys`: the queue's order when `keys` is a sequencer's
/// [`queue_order`].
pub fn by_keys(keys: &[QueueKey], a: &Session, b: &Session) -> std::cmp::Ordering {
    keys.iter()
        .map(|key| match key {
            QueueKey::PriorityDesc => b.priority.cmp(&a.priority),
            QueueKey::SubmittedAt => a.submitted_at.cmp(&b.submitted_at),
            QueueKey::SubmittedAtDesc => b.submitted_at.cmp(&a.submitted_at),
            QueueKey::Id => a.id.cmp(&b.id),
        })
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

/// What each owner holds now, by owner (DRF reads those with sessions in the queue). Ordered:
/// a queue has few owners, and a look-up among them compares a few short names in line where
/// hashing each name cost more.
pub type Usage<'a> = BTreeMap<Key<'a>, Vector>;

/// The order in which to consider `sessions` (indexes into it).
///
/// `needs[i]` is the required shares of `sessions[i]`; `usage` is what each owner holds now and
/// `total` the group's capacity, both for DRF.
pub fn sequence<N: AsRef<[u64]>>(
    sequencer: Sequencer,
    sessions: &[&Session],
    needs: &[N],
    usage: &Usage,
    total: &[u64],
) -> Vec<usize> {
    let order = keyed_order(sequencer, sessions);
    if sequencer == Sequencer::Drf {
        return drf_order(&order, sessions, needs, usage, total);
    }
    order
}

/// The order of `sessions` by their sequencer's keys ([`queue_order`]): [`sequence`]'s, but
/// for fair share, which starts from it.
pub fn keyed_order(sequencer: Sequencer, sessions: &[&Session]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sessions.len()).collect();
    let keys = queue_order(sequencer);
    order.sort_by(|&a, &b| by_keys(keys, sessions[a], sessions[b]));
    order
}

/// Progressive filling: repeatedly serve the owner with the smallest dominant share, as if each
/// session served were placed. `fifo` is the sessions to order (indexes into `sessions`, a
/// subset of them when some are left out), in [`keyed_order`].
pub(crate) fn drf_order<N: AsRef<[u64]>>(
    fifo: &[usize],
    sessions: &[&Session],
    needs: &[N],
    usage: &Usage,
    total: &[u64],
) -> Vec<usize> {
    // Each owner's sessions in queue order, one run per owner, the owners in their names'
    // order (a stable sort keeps the queue's order within a run).
    let owner = |i: usize| Key(&sessions[i].owner);
    let mut by_owner = fifo.to_vec();
    by_owner.sort_by(|&a, &b| owner(a).cmp(&owner(b)));
    let share = |used: &[u64]| {
        used.iter()
            .zip(total)
            .map(|(&u, &t)| Share::new(u, t))
            .max()
            .unwrap_or(Share::ZERO)
    };
    // Per owner: the next of its sessions to serve and the end of its run, and what it holds.
    // Sized for an owner per session, the most there can be: grown step by step, they cost
    // more than the sort.
    let mut runs: Vec<(usize, usize)> = Vec::with_capacity(fifo.len());
    let mut used = Rows::with_capacity(total.len(), fifo.len());
    let mut heap = BinaryHeap::with_capacity(fifo.len());
    let mut start = 0;
    while start < by_owner.len() {
        let name = owner(by_owner[start]);
        let len = (by_owner[start..].iter())
            .take_while(|&&i| owner(i) == name)
            .count();
        match usage.get(&name) {
            Some(u) => used.push(u),
            None => used.push(&vec![0; total.len()]),
        }
        heap.push(Reverse((share(&used[runs.len()]), runs.len())));
        runs.push((start, start + len));
        start += len;
    }
    let mut order = Vec::with_capacity(fifo.len());
    while let Some(Reverse((_, o))) = heap.pop() {
        let (next, end) = &mut runs[o];
        let i = by_owner[*next];
        *next += 1;
        order.push(i);
        dense::add(&mut used[o], needs[i].as_ref());
        if *next < *end {
            heap.push(Reverse((share(&used[o]), o)));
        }
    }
    order
}

/// Below this many agents, a search walks them all instead of keeping an ordered set of them per
/// slot: the sets cost more to make than such a walk.
const WALK_BELOW: usize = 64;

/// Free capacity of the agents sessions may go to, indexed per slot.
#[derive(Debug, Clone)]
pub struct FreeIndex {
    free: Rows,
    open: Vec<bool>,
    /// Per slot, the open agents by free amount: made the first time a search is keyed on the
    /// slot (most passes key on a few of their slots), kept up to date after.
    by_slot: Vec<Option<BTreeSet<(u64, u32)>>>,
    /// Per slot, the most any agent has: scales requests when choosing the slot to search by.
    biggest: Vector,
    /// The agents' devices, when the vectors have device dimensions.
    devices: Option<Box<Devices>>,
    /// Reused by `take`, which computes an agent's free capacity after a placement.
    scratch: Vec<u64>,
    /// Below this many agents, searches walk them all ([`WALK_BELOW`]; the tests change it to
    /// check that both ways choose alike).
    walk_below: usize,
}

/// Which device of each agent holds what: the device dimensions of the free vectors are their
/// summary, recomputed when a placement takes devices.
#[derive(Debug, Clone)]
struct Devices {
    layout: Arc<DeviceLayout>,
    ledgers: Vec<Ledger>,
}

impl FreeIndex {
    /// `free[i]` is agent i's free capacity over `dims` slots; only agents with `open[i]` receive
    /// sessions.
    pub fn new(dims: usize, free: Rows, open: Vec<bool>) -> Self {
        let by_slot = vec![None; dims];
        let mut biggest = vec![0u64; dims].into_boxed_slice();
        for (f, _) in free.iter().zip(&open).filter(|(_, &o)| o) {
            for (b, x) in biggest.iter_mut().zip(f.iter()) {
                *b = (*b).max(*x);
            }
        }
        FreeIndex {
            free,
            open,
            by_slot,
            biggest,
            devices: None,
            scratch: Vec::new(),
            walk_below: WALK_BELOW,
        }
    }

    /// With the agents' device ledgers (one per agent, as `free`), which the device dimensions
    /// of `free` summarise under `layout`. Without device dimensions, nothing changes.
    pub fn with_devices(mut self, layout: &Arc<DeviceLayout>, ledgers: Vec<Ledger>) -> Self {
        if layout.dims() > 0 {
            self.devices = Some(Box::new(Devices {
                layout: layout.clone(),
                ledgers,
            }));
        }
        self
    }

    pub fn free(&self, agent: usize) -> &[u64] {
        &self.free[agent]
    }

    /// The agent's devices and what is free on each, when the index has devices.
    pub fn ledger(&self, agent: usize) -> Option<&Ledger> {
        self.devices.as_ref().map(|d| &d.ledgers[agent])
    }

    /// Every agent's ledger; none when the index has no devices.
    pub fn ledgers(&self) -> &[Ledger] {
        self.devices.as_ref().map_or(&[], |d| &d.ledgers)
    }

    /// Every agent's free capacity and ledger (none when the index has no devices), as the
    /// placements left them.
    pub fn into_parts(self) -> (Rows, Vec<Ledger>) {
        (self.free, self.devices.map_or_else(Vec::new, |d| d.ledgers))
    }

    /// Whether the summary alone decides for `need` (else the agent's devices are looked at).
    fn exact(&self, need: &[u64]) -> bool {
        self.devices.as_ref().is_none_or(|d| d.layout.exact(need))
    }

    /// Whether agent `i` holds `need`: its free capacity, and, where the summary cannot tell,
    /// its devices.
    fn holds(&self, i: usize, need: &[u64], exact: bool) -> bool {
        fits(need, &self.free[i])
            && (exact
                || self
                    .devices
                    .as_ref()
                    .is_some_and(|d| d.ledgers[i].can_hold(&d.layout, need)))
    }

    pub fn is_open(&self, agent: usize) -> bool {
        self.open[agent]
    }

    /// Lets sessions go to one more agent (one unmarked in this pass).
    pub fn open(&mut self, agent: usize) {
        if !self.open[agent] {
            self.open[agent] = true;
            for (d, tree) in self.by_slot.iter_mut().enumerate() {
                if let Some(tree) = tree {
                    tree.insert((self.free[agent][d], agent as u32));
                }
                self.biggest[d] = self.biggest[d].max(self.free[agent][d]);
            }
        }
    }

    /// The agent `need` goes to under `placement`, if any has room.
    pub fn find(&mut self, need: &[u64], placement: PlacementStrategy) -> Option<usize> {
        self.search(need, placement, None).map(|(agent, _)| agent)
    }

    /// Like `find`, resuming where the last search of the same class stopped: agents it walked
    /// past did not fit, and capacity only shrinks during a pass, so they need not be walked
    /// again. Returns the agent and where to resume next time.
    fn search(
        &mut self,
        need: &[u64],
        placement: PlacementStrategy,
        resume: Option<Cursor>,
    ) -> Option<(usize, Cursor)> {
        let Some(key) = self.key_slot(need) else {
            // A request with no slots at all fits any open agent.
            let agent = self.open.iter().position(|&o| o)?;
            return Some((agent, Cursor::default()));
        };
        // Small groups are walked whole: no ordered set is made for them.
        if self.free.len() >= self.walk_below && self.by_slot[key].is_none() {
            let tree = (0..self.free.len())
                .filter(|&i| self.open[i])
                .map(|i| (self.free[i][key], i as u32))
                .collect();
            self.by_slot[key] = Some(tree);
        }
        let this = &*self;
        let from = (need[key], 0u32);
        let exact = this.exact(need);
        // The first (or, with `last`, the last) open agent that fits, in the key slot's order
        // (free amount, then index) within `range`: from the slot's ordered set, or, without
        // one, by walking every agent.
        let first = |range: (Bound<Place>, Bound<Place>), last: bool| {
            let fitting = |&(_, i): &Place| this.holds(i as usize, need, exact);
            match &this.by_slot[key] {
                Some(tree) if last => tree.range(range).rev().copied().find(fitting),
                Some(tree) => tree.range(range).copied().find(fitting),
                None => {
                    let mut found: Option<Place> = None;
                    for i in 0..this.free.len() {
                        let p = (this.free[i][key], i as u32);
                        let better = found.is_none_or(|f| if last { p > f } else { p < f });
                        if better && range.contains(&p) && this.open[i] && fitting(&p) {
                            found = Some(p);
                        }
                    }
                    found
                }
            }
        };
        let found = match (placement, resume) {
            // Best fit on the scarcest slot of the request: fill the fullest agent first.
            (PlacementStrategy::Binpack, None) => first((Included(from), Unbounded), false),
            (PlacementStrategy::Binpack, Some(c)) => {
                let last = c.agent as usize;
                if this.open[last] && this.holds(last, need, exact) {
                    return Some((last, c));
                }
                let start = c.position.max(from);
                // Agents that shrank from above the cursor to below it were not walked yet.
                first((Included(start), Unbounded), false)
                    .or_else(|| first((Included(from), Excluded(start)), false))
            }
            // Most free of that slot: spread the load. Agents above the cursor were walked
            // past, and agents never grow, so the walk goes on from the cursor down.
            (PlacementStrategy::Spread, None) => first((Included(from), Unbounded), true),
            (PlacementStrategy::Spread, Some(c)) if c.position < from => None,
            (PlacementStrategy::Spread, Some(c)) => {
                first((Included(from), Included(c.position)), true)
            }
        };
        found.map(|(k, i)| {
            (
                i as usize,
                Cursor {
                    position: (k, i),
                    agent: i,
                },
            )
        })
    }

    /// Takes `need` from the agent's free capacity, and its device part from the agent's
    /// devices: returns the devices taken. The caller has checked that it holds it.
    pub fn take(&mut self, agent: usize, need: &[u64]) -> Vec<Grant> {
        let mut after = std::mem::take(&mut self.scratch);
        after.clear();
        after.extend_from_slice(&self.free[agent]);
        let named = self
            .devices
            .as_ref()
            .map_or(need.len(), |d| d.layout.offset());
        dense::take(&mut after[..named], &need[..named]);
        let mut grants = Vec::new();
        if let Some(d) = &mut self.devices {
            if need[named..].iter().any(|&n| n > 0) {
                grants = d.ledgers[agent]
                    .take(&d.layout, need)
                    .expect("a session is placed only where its devices fit");
                d.layout.write_free(&d.ledgers[agent], &mut after);
            }
        }
        let free = &mut self.free[agent];
        for (d, (old, &new)) in free.iter_mut().zip(after.iter()).enumerate() {
            if *old != new {
                if let (true, Some(tree)) = (self.open[agent], &mut self.by_slot[d]) {
                    tree.remove(&(*old, agent as u32));
                    tree.insert((new, agent as u32));
                }
                *old = new;
            }
        }
        self.scratch = after;
        grants
    }

    /// The requested slot that is largest relative to the biggest agent: the one that rules out
    /// the most agents, so the range walk starts past them.
    fn key_slot(&self, need: &[u64]) -> Option<usize> {
        let mut best: Option<(usize, Share)> = None;
        for (d, &n) in need.iter().enumerate().filter(|(_, &n)| n > 0) {
            let s = Share::new(n, self.biggest[d]);
            if best.is_none_or(|(_, b)| s > b) {
                best = Some((d, s));
            }
        }
        best.map(|(d, _)| d)
    }
}

/// An agent's place in a key slot's order: its free amount of the slot, then its index.
type Place = (u64, u32);

/// Where a class's last search found its agent: the agent, and its place in the key slot's order.
#[derive(Debug, Clone, Copy, Default)]
struct Cursor {
    position: (u64, u32),
    agent: u32,
}

/// What became of one session in a scheduling pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Placed {
        agent: usize,
    },
    /// No open agent has room.
    NoRoom,
    /// It might fit, but the session at this index blocks the head of the queue.
    HeldBehind {
        blocker: usize,
    },
}

/// One request to place: its required shares, its equivalence class and its passes blocked.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub need: &'a [u64],
    pub class: usize,
    pub blocked_passes: u32,
}

/// What [`place`] decided, per request (indexed like `requests`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placed {
    pub outcomes: Vec<Outcome>,
    /// The devices each placed request takes on its agent (none for the others).
    pub grants: Vec<Vec<Grant>>,
}

/// Places requests in `order`; returns an outcome per request (indexed like `requests`).
///
/// With `hold` false, head-of-line blocking is ignored (the trial placement that measures unmet
/// demand for the scaler); otherwise `config.head_of_line` applies.
pub fn place(
    config: &SchedulerConfig,
    requests: &[Request],
    order: &[usize],
    classes: usize,
    index: &mut FreeIndex,
    hold: bool,
) -> Placed {
    let mut outcomes = vec![Outcome::NoRoom; requests.len()];
    let mut grants = vec![Vec::new(); requests.len()];
    let mut class_full = vec![false; classes];
    let mut cursors: Vec<Option<Cursor>> = vec![None; classes];
    let mut blocker: Option<usize> = None;
    for &i in order {
        if let Some(b) = blocker {
            outcomes[i] = Outcome::HeldBehind { blocker: b };
            continue;
        }
        let r = &requests[i];
        let found = if class_full[r.class] {
            None
        } else {
            index.search(r.need, config.placement, cursors[r.class])
        };
        match found {
            Some((agent, cursor)) => {
                cursors[r.class] = Some(cursor);
                grants[i] = index.take(agent, r.need);
                outcomes[i] = Outcome::Placed { agent };
            }
            None => {
                class_full[r.class] = true;
                if hold && config.holds_queue(r.blocked_passes) {
                    blocker = Some(i);
                }
            }
        }
    }
    Placed { outcomes, grants }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HeadOfLine, SessionId, Timestamp};
    use proptest::prelude::*;

    proptest! {
        /// The walk over every agent and the ordered sets place every request on the same
        /// agent, under either strategy, with cursors resumed class by class.
        #[test]
        fn walking_the_agents_places_as_the_ordered_sets_do(
            agents in prop::collection::vec((0u64..16, 0u64..4, prop::bool::weighted(0.8)), 1..24),
            needs in prop::collection::vec((0u64..6, 0u64..3), 1..30),
            spread in any::<bool>(),
        ) {
            let config = SchedulerConfig {
                sequencer: Sequencer::Fifo,
                placement: if spread { PlacementStrategy::Spread } else { PlacementStrategy::Binpack },
                head_of_line: HeadOfLine::Backfill,
                skip_after: 0,
            };
            let needs: Vec<Vector> = needs.iter().map(|&(c, g)| v(&[c, g])).collect();
            // One class per distinct need, as a pass makes them.
            let mut distinct: Vec<&Vector> = Vec::new();
            let requests: Vec<Request> = needs.iter().map(|n| {
                let class = distinct.iter().position(|d| *d == n).unwrap_or_else(|| {
                    distinct.push(n);
                    distinct.len() - 1
                });
                Request { need: n, class, blocked_passes: 0 }
            }).collect();
            let order: Vec<usize> = (0..requests.len()).collect();
            let rows: Vec<Vector> = agents.iter().map(|&(c, g, _)| v(&[c, g])).collect();
            let index = |walk_below: usize| {
                let free = Rows::of(2, rows.iter().map(|r| &r[..]));
                let mut index = FreeIndex::new(2, free, agents.iter().map(|a| a.2).collect());
                index.walk_below = walk_below;
                index
            };
            let (mut walked, mut ordered) = (index(usize::MAX), index(0));
            let by_walk = place(&config, &requests, &order, distinct.len(), &mut walked, true);
            let by_sets = place(&config, &requests, &order, distinct.len(), &mut ordered, true);
            prop_assert_eq!(by_walk.outcomes, by_sets.outcomes);
            prop_assert_eq!(walked.into_parts().0, ordered.into_parts().0);
        }
    }

    fn v(x: &[u64]) -> Vector {
        x.to_vec().into_boxed_slice()
    }

    fn session(id: &str, owner: &str, priority: i32, at: i64) -> Session {
        Session {
            id: SessionId(id.into()),
            group: String::new(),
            owner: owner.into(),
            priority,
            request: Default::default(),
            image: None,
            kind: Default::default(),
            submitted_at: Timestamp(at),
            state: Default::default(),
            agent: None,
            blocked_passes: 0,
            constraints: Vec::new(),
            devices: Vec::new(),
            array: None,
        }
    }

    fn ids(order: &[usize], sessions: &[&Session]) -> Vec<String> {
        order.iter().map(|&i| sessions[i].id.0.clone()).collect()
    }

    #[test]
    fn sequencers_order_as_documented() {
        let all = [
            session("a", "x", 0, 3),
            session("b", "x", 5, 2),
            session("c", "y", 5, 1),
            session("d", "y", 0, 0),
        ];
        let s: Vec<&Session> = all.iter().collect();
        let needs = vec![v(&[1]); 4];
        let usage = Usage::default();
        let seq = |q| ids(&sequence(q, &s, &needs, &usage, &[10]), &s);
        assert_eq!(seq(Sequencer::Fifo), ["d", "c", "b", "a"]);
        assert_eq!(seq(Sequencer::Lifo), ["a", "b", "c", "d"]);
        assert_eq!(seq(Sequencer::Priority), ["c", "b", "d", "a"]);
    }

    #[test]
    fn drf_serves_the_owner_with_the_smallest_dominant_share() {
        // x already holds half the cpu; y holds nothing, so y's sessions come first until even.
        let all = [
            session("x1", "x", 0, 0),
            session("x2", "x", 0, 1),
            session("y1", "y", 0, 2),
            session("y2", "y", 0, 3),
            session("y3", "y", 0, 4),
        ];
        let s: Vec<&Session> = all.iter().collect();
        let needs = vec![v(&[10, 0]); 5];
        let usage = Usage::from_iter([(Key("x"), v(&[50, 0]))]);
        let order = sequence(Sequencer::Drf, &s, &needs, &usage, &[100, 8]);
        assert_eq!(ids(&order, &s), ["y1", "y2", "y3", "x1", "x2"]);
    }

    fn index(free: &[&[u64]]) -> FreeIndex {
        FreeIndex::new(
            free[0].len(),
            Rows::of(free[0].len(), free.iter().copied()),
            vec![true; free.len()],
        )
    }

    #[test]
    fn binpack_fills_the_fullest_agent_and_spread_the_emptiest() {
        let mut idx = index(&[&[4, 0], &[2, 0], &[8, 0]]);
        assert_eq!(idx.find(&[2, 0], PlacementStrategy::Binpack), Some(1));
        assert_eq!(idx.find(&[2, 0], PlacementStrategy::Spread), Some(2));
        assert_eq!(idx.find(&[9, 0], PlacementStrategy::Binpack), None);
        // The key slot is gpu (scarcest); the agent with enough gpu but too little cpu is skipped.
        let mut idx = index(&[&[1, 4], &[8, 4], &[8, 8]]);
        assert_eq!(idx.find(&[2, 4], PlacementStrategy::Binpack), Some(1));
    }

    #[test]
    fn closed_agents_get_nothing_until_opened() {
        let mut idx = FreeIndex::new(1, Rows::of(1, [&[8u64][..], &[8]]), vec![false, true]);
        assert_eq!(idx.find(&[4], PlacementStrategy::Spread), Some(1));
        idx.take(1, &[8]);
        assert_eq!(idx.find(&[4], PlacementStrategy::Spread), None);
        idx.open(0);
        assert_eq!(idx.find(&[4], PlacementStrategy::Spread), Some(0));
    }

    fn requests(needs: &[Vector], blocked: u32) -> Vec<Request<'_>> {
        needs
            .iter()
            .enumerate()
            .map(|(i, n)| Request {
                need: n,
                class: i,
                blocked_passes: blocked,
            })
            .collect()
    }

    #[test]
    fn strict_head_of_line_holds_everything_behind_a_blocked_session() {
        let needs = [v(&[2]), v(&[16]), v(&[2])];
        let order = [0, 1, 2];
        let strict = SchedulerConfig {
            head_of_line: HeadOfLine::Strict,
            ..Default::default()
        };
        let out = place(
            &strict,
            &requests(&needs, 0),
            &order,
            3,
            &mut index(&[&[8]]),
            true,
        )
        .outcomes;
        assert_eq!(
            out,
            [
                Outcome::Placed { agent: 0 },
                Outcome::NoRoom,
                Outcome::HeldBehind { blocker: 1 }
            ]
        );
        // The trial placement for the scaler ignores the hold.
        let out = place(
            &strict,
            &requests(&needs, 0),
            &order,
            3,
            &mut index(&[&[8]]),
            false,
        )
        .outcomes;
        assert_eq!(out[2], Outcome::Placed { agent: 0 });
    }

    #[test]
    fn backfill_skips_a_blocked_session_after_its_passes() {
        let needs = [v(&[16]), v(&[2])];
        let cfg = SchedulerConfig {
            head_of_line: HeadOfLine::Backfill,
            skip_after: 2,
            ..Default::default()
        };
        let out = place(
            &cfg,
            &requests(&needs, 1),
            &[0, 1],
            2,
            &mut index(&[&[8]]),
            true,
        )
        .outcomes;
        assert_eq!(out[1], Outcome::HeldBehind { blocker: 0 });
        let out = place(
            &cfg,
            &requests(&needs, 2),
            &[0, 1],
            2,
            &mut index(&[&[8]]),
            true,
        )
        .outcomes;
        assert_eq!(out[1], Outcome::Placed { agent: 0 });
    }

    #[test]
    fn a_class_without_room_is_not_searched_again_and_never_overfills() {
        let needs = [v(&[3]), v(&[3]), v(&[3])];
        let reqs: Vec<Request> = needs
            .iter()
            .map(|n| Request {
                need: n,
                class: 0,
                blocked_passes: 0,
            })
            .collect();
        let mut idx = index(&[&[4], &[4]]);
        let out = place(
            &SchedulerConfig::default(),
            &reqs,
            &[0, 1, 2],
            1,
            &mut idx,
            true,
        )
        .outcomes;
        assert_eq!(
            out.iter()
                .filter(|o| matches!(o, Outcome::Placed { .. }))
                .count(),
            2
        );
        assert_eq!(out[2], Outcome::NoRoom);
        assert_eq!((idx.free(0), idx.free(1)), (&[1u64][..], &[1u64][..]));
    }
}
