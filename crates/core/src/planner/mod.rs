//! Scale-out planning: packs unmet demand onto instance templates at (nearly) the least price per
//! hour.
//!
//! Pure and deterministic: no IO, no clock, no randomness, no hash-map order. Slot arithmetic is
//! integer; `f64` is used only for prices, costs and weights.
//!
//! Method. First an LP prices every class: the dual of the class-assignment LP (see
//! [`class_lower_bound`]) gives `μ_ts`, what offer `t` charges per unit of slot `s`, and from it
//! `π_c = min_t need_c·μ_t`, what one session of class `c` costs in the fractional optimum: its
//! *work*. Unlike the aggregate LP of [`lower_bound`], that LP cannot take a session's GPU from one
//! template and its memory from another, so its prices are those packing meets. Then a greedy in
//! the manner of first-fit-decreasing: the class with the most work left leads; every offer that
//! fits it fills one fresh instance (the lead first, then the other classes in the offer's order,
//! in three ways of sharing the instance, the fullest kept); the fill with the least price per
//! fitted work wins (1 would be as good as the LP) and is committed as many times at once as the
//! remaining counts and the limits allow, so iterations count distinct fills, not instances. The
//! greedy runs twice, with two orders of the classes within an instance, and the better plan is
//! kept. The LP takes most of the time, and its size depends on the number of classes, not of
//! sessions.
//!
//! Files: this one holds the public types and [`pack`], which runs the steps; `prices.rs` the LPs
//! (class prices, offer charges, slot prices) and the tie-break of weights; `greedy.rs` the fill;
//! `headroom.rs` the extra instances for the headroom deficit; `bounds.rs` the lower bounds;
//! `tables.rs` the flat tables of needs and capacities that all of them read.

mod bounds;
mod greedy;
mod headroom;
mod memo;
mod prices;
mod tables;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::dense::Vector;

pub use bounds::{class_lower_bound, lower_bound};
pub use memo::PriceMemo;
use prices::{class_prices, Tie};
use tables::{valid_price, Tables};

/// One shape of unmet demand: the required shares of a session, and how many sessions need it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemandClass {
    pub need: Vector,
    pub count: u32,
}

/// A template the policy may launch now.
///
/// An offer whose price is negative or not finite is never launched and never priced (it would
/// make the least price meaningless); the policy should reject such templates earlier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    pub slots: Vector,
    pub price_per_hour: f64,
    /// How many more instances of this template may be launched.
    pub available: u32,
}

impl Offer {
    /// A template as an offer over `index`'s slots.
    pub fn of(
        template: &crate::model::InstanceTemplate,
        index: &crate::dense::SlotIndex,
        available: u32,
    ) -> Self {
        Offer {
            slots: index.vector(&template.slots),
            price_per_hour: template.price_per_hour,
            available,
        }
    }
}

/// `count` identical instances of one offer, each holding the same sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchGroup {
    /// Index into the offers.
    pub offer: usize,
    /// How many instances of this group to launch.
    pub count: u32,
    /// What ONE instance of the group holds: (class index, sessions of that class), by class
    /// index. Empty for instances launched only for headroom.
    pub holds: Vec<(usize, u32)>,
}

/// The result of [`pack`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pack {
    /// Per offer: instances to launch.
    pub launches: Vec<u32>,
    /// Per class: (offer index, sessions of this class that the planned instances of that offer
    /// hold), by offer index; offers holding none are left out.
    pub served: Vec<Vec<(usize, u32)>>,
    /// Per class: sessions no planned instance holds (limits hit, or fits no offer).
    pub unserved: Vec<u32>,
    /// The planned instances, grouped by identical contents: what the launches hold, instance by
    /// instance, so that the policy can tell which sessions each new instance is meant for.
    pub groups: Vec<LaunchGroup>,
    /// Per slot: the part of the headroom deficit that the planned instances still leave
    /// uncovered (limits hit, or no offer has that slot). All zeros when covered.
    pub headroom_short: Vector,
}

impl Pack {
    /// Price per hour of the planned launches.
    pub fn cost(&self, offers: &[Offer]) -> f64 {
        self.launches
            .iter()
            .zip(offers)
            .map(|(&n, o)| f64::from(n) * o.price_per_hour)
            .sum()
    }

    /// Sessions held by the planned instances, all classes together.
    pub fn served_total(&self) -> u64 {
        self.served
            .iter()
            .flatten()
            .map(|&(_, n)| u64::from(n))
            .sum()
    }
}

/// Packs the sessions of all classes into new instances of the offers, at (nearly) the least total
/// price per hour.
///
/// Never launches more than `offer.available` of an offer, nor more than `node_budget` instances
/// in total. Afterwards the planned instances' leftover free capacity, summed over the instances,
/// must also cover `headroom_deficit` (per slot; all zeros means no headroom): extra instances are
/// launched, cheapest per unit of deficit, where it does not.
///
/// Vectors of different lengths are read as padded with zeros to the longest (a missing slot is
/// 0). When a limit binds, the classes with the most work per session are served first, each at
/// its best price, rather than the most sessions.
pub fn pack(
    classes: &[DemandClass],
    offers: &[Offer],
    node_budget: u32,
    headroom_deficit: &[u64],
) -> Pack {
    pack_with(classes, offers, node_budget, headroom_deficit, None)
}

/// [`pack`], taking the class prices from `memo` when an earlier packing solved them for the
/// same inputs (and leaving there those it solves): the same packing, found faster by a caller
/// that packs again and again (a group's passes).
pub fn pack_remembering(
    classes: &[DemandClass],
    offers: &[Offer],
    node_budget: u32,
    headroom_deficit: &[u64],
    memo: &mut PriceMemo,
) -> Pack {
    pack_with(classes, offers, node_budget, headroom_deficit, Some(memo))
}

fn pack_with(
    classes: &[DemandClass],
    offers: &[Offer],
    node_budget: u32,
    headroom_deficit: &[u64],
    memo: Option<&mut PriceMemo>,
) -> Pack {
    let width = tables::width(classes, offers, headroom_deficit.len());
    let usable = |o: &Offer| valid_price(o.price_per_hour) && o.available > 0;
    // Nothing may be launched, or nothing would be (most passes: the queue waits for instances
    // of templates at their limit, and no headroom is short): no prices to solve for.
    let launchable = node_budget > 0 && offers.iter().any(usable);
    let any_fit = || {
        (classes.iter())
            .any(|c| (offers.iter()).any(|o| usable(o) && tables::fits_padded(&c.need, &o.slots)))
    };
    if !launchable || (headroom_deficit.iter().all(|&d| d == 0) && !any_fit()) {
        return Pack {
            launches: vec![0; offers.len()],
            served: vec![Vec::new(); classes.len()],
            unserved: classes.iter().map(|c| c.count).collect(),
            groups: Vec::new(),
            headroom_short: tables::padded(headroom_deficit, width).into_boxed_slice(),
        };
    }
    solve(classes, offers, node_budget, headroom_deficit, width, memo)
}

/// [`pack`], every step run.
fn solve(
    classes: &[DemandClass],
    offers: &[Offer],
    node_budget: u32,
    headroom_deficit: &[u64],
    width: usize,
    memo: Option<&mut PriceMemo>,
) -> Pack {
    let t = Tables::new(classes, offers, width, |o| {
        valid_price(o.price_per_hour) && o.available > 0
    });
    let tie = Tie::new(&t);
    let solved;
    let lp = match memo {
        Some(memo) => memo.prices(&t),
        None => {
            solved = class_prices(&t);
            &solved
        }
    };
    let work: Vec<f64> = (0..t.n_classes())
        .map(|c| lp.pi[c] + tie.of(t.need(c)))
        .collect();
    let mut plan = greedy::fill(&t, offers, lp, &work, node_budget);
    let short = headroom::cover(&t, offers, &tie, headroom_deficit, node_budget, &mut plan);
    let (served, unserved) = tally(&t, &plan);
    Pack {
        launches: plan.launched,
        served,
        unserved,
        groups: plan.groups,
        headroom_short: short.into_boxed_slice(),
    }
}

/// Per class: the sessions the planned instances hold, by offer index (offers holding none left
/// out), and the sessions they do not.
fn tally(t: &Tables, plan: &greedy::Filled) -> (Vec<Vec<(usize, u32)>>, Vec<u32>) {
    let (n_classes, n_offers) = (t.n_classes(), t.n_offers());
    let mut held = vec![0u64; n_classes * n_offers];
    for g in &plan.groups {
        for &(c, n) in &g.holds {
            held[c * n_offers + g.offer] += u64::from(n) * u64::from(g.count);
        }
    }
    // Held sessions of a class never exceed its count, a u32; so neither does what is left.
    let narrow = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    let served = (0..n_classes)
        .map(|c| {
            (0..n_offers)
                .filter(|&o| held[c * n_offers + o] > 0)
                .map(|o| (o, narrow(held[c * n_offers + o])))
                .collect()
        })
        .collect();
    (served, plan.rem.iter().map(|&x| narrow(x)).collect())
}
