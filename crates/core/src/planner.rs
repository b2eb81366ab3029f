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

use std::collections::BTreeMap;

use microlp::{ComparisonOp, OptimizationDirection, Problem};
use serde::{Deserialize, Serialize};

use crate::dense::{fits, Vector};

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
    let width = classes
        .iter()
        .map(|c| c.need.len())
        .chain(offers.iter().map(|o| o.slots.len()))
        .chain(std::iter::once(headroom_deficit.len()))
        .max()
        .unwrap_or(0);
    let needs = flat(classes.iter().map(|c| &c.need[..]), width);
    let caps = flat(offers.iter().map(|o| &o.slots[..]), width);
    let (n_classes, n_offers) = (classes.len(), offers.len());
    let need = |c: usize| &needs[c * width..(c + 1) * width];
    let cap = |t: usize| &caps[t * width..(t + 1) * width];

    let usable: Vec<bool> = offers
        .iter()
        .map(|o| valid_price(o.price_per_hour) && o.available > 0)
        .collect();
    let prices: Vec<f64> = offers.iter().map(|o| o.price_per_hour).collect();
    let counts: Vec<u64> = classes.iter().map(|c| u64::from(c.count)).collect();
    let fit = fit_matrix(&needs, n_classes, &caps, &usable, width);
    let unit = units(&caps, &usable, width);
    let p0 = prices
        .iter()
        .zip(&usable)
        .filter(|&(&p, &u)| u && p > 0.0)
        .map(|(&p, _)| p)
        .fold(f64::INFINITY, f64::min);
    let p0 = if p0.is_finite() { p0 } else { 1.0 };
    // A tiny term in fractions of the largest template, added to every weight so that no weight
    // is 0 and ties break by size.
    let tie = |v: &[u64]| -> f64 {
        let size: f64 = v
            .iter()
            .zip(&unit)
            .filter(|(_, &u)| u > 0.0)
            .map(|(&x, &u)| x as f64 / u)
            .sum();
        TIE_EPS * p0 * (1e-3 + size)
    };

    let lp = class_prices(&needs, &counts, &caps, &prices, &usable, &fit, width);
    let work: Vec<f64> = (0..n_classes).map(|c| lp.pi[c] + tie(need(c))).collect();
    // Most work first; ties by class index (the sort is stable).
    let mut order: Vec<usize> = (0..n_classes)
        .filter(|&c| counts[c] > 0 && (0..n_offers).any(|t| fit[c * n_offers + t]))
        .collect();
    order.sort_by(|&a, &b| work[b].total_cmp(&work[a]));
    // Two fill orders per offer, each run in full, the better plan kept (more sessions served,
    // then cheaper): by work alone, and the classes the offer holds at the LP's price first
    // (efficiency `π_c / need_c·μ_t` ≤ 1, in steps of 2%), then by work. The first packs
    // single-family demand tighter, the second finds the mixes (GPU instances topped up with
    // CPU-only sessions) that the LP prices in; the greedy costs little beside the LP.
    let efficiency = |c: usize, t: usize| -> i64 {
        let mu = &lp.mu[t * width..(t + 1) * width];
        let charge: f64 = need(c).iter().zip(mu).map(|(&x, m)| x as f64 * m).sum();
        let eff = if charge > 0.0 { lp.pi[c] / charge } else { 1.0 };
        (eff.min(1.0) * 50.0).floor() as i64
    };
    let run = |by_efficiency: bool| {
        let orders: Vec<Vec<usize>> = (0..n_offers)
            .map(|t| {
                let mut mine: Vec<usize> = order
                    .iter()
                    .copied()
                    .filter(|&c| fit[c * n_offers + t])
                    .collect();
                if by_efficiency {
                    mine.sort_by_key(|&c| std::cmp::Reverse(efficiency(c, t)));
                }
                mine
            })
            .collect();
        let mut greedy = Greedy {
            width,
            needs: &needs,
            caps: &caps,
            offers,
            usable: &usable,
            fit: &fit,
            work: &work,
            orders,
            node_budget,
            rem: counts.clone(),
            launched: vec![0; n_offers],
            total: 0,
            groups: Vec::new(),
        };
        greedy.run(&order);
        greedy
    };
    let (by_work, by_efficiency) = (run(false), run(true));
    let best = if by_efficiency.better_than(&by_work) {
        by_efficiency
    } else {
        by_work
    };
    let Greedy {
        rem,
        mut launched,
        mut total,
        mut groups,
        ..
    } = best;

    // Headroom: what the planned instances leave free, summed, against the deficit.
    let mut short = padded(headroom_deficit, width);
    for g in &groups {
        let mut left: Vec<u128> = cap(g.offer).iter().map(|&x| u128::from(x)).collect();
        for &(c, n) in &g.holds {
            for (l, &x) in left.iter_mut().zip(need(c)) {
                // The fill only took what fits.
                *l -= u128::from(x) * u128::from(n);
            }
        }
        for (r, l) in short.iter_mut().zip(&left) {
            let covered = l.saturating_mul(u128::from(g.count));
            *r = u64::try_from(u128::from(*r).saturating_sub(covered)).unwrap_or(u64::MAX);
        }
    }
    if short.iter().any(|&r| r > 0) {
        // Slot prices for the deficit alone (zero where no offer has the slot: it stays short).
        let d: Vec<f64> = short
            .iter()
            .zip(&unit)
            .map(|(&r, &u)| if u > 0.0 { r as f64 } else { 0.0 })
            .collect();
        let y = slot_prices(&d, &caps, &prices, &usable, width).unwrap_or(vec![0.0; width]);
        let weigh = |v: &[u64]| -> f64 {
            v.iter().zip(&y).map(|(&x, &y)| x as f64 * y).sum::<f64>() + tie(v)
        };
        let mut piece = vec![0u64; width];
        while total < node_budget && short.iter().any(|&r| r > 0) {
            let mut best: Option<(usize, f64)> = None;
            for t in (0..n_offers).filter(|&t| usable[t] && launched[t] < offers[t].available) {
                for s in 0..width {
                    piece[s] = cap(t)[s].min(short[s]);
                }
                if piece.iter().all(|&x| x == 0) {
                    continue;
                }
                let score = prices[t] / weigh(&piece);
                if best.is_none_or(|(_, b)| score < b) {
                    best = Some((t, score));
                }
            }
            let Some((t, _)) = best else { break };
            // As many copies as the deficit uses whole (at least one), within the limits.
            let k = (0..width)
                .filter(|&s| short[s] > 0 && cap(t)[s] > 0)
                .map(|s| short[s] / cap(t)[s])
                .min()
                .unwrap_or(0)
                .max(1)
                .min(u64::from(offers[t].available - launched[t]))
                .min(u64::from(node_budget - total));
            // k ≤ a u32 difference.
            let k32 = u32::try_from(k).unwrap_or(u32::MAX);
            for (r, &x) in short.iter_mut().zip(cap(t)) {
                *r = r.saturating_sub(x.saturating_mul(k));
            }
            launched[t] += k32;
            total += k32;
            match groups
                .iter_mut()
                .find(|g| g.offer == t && g.holds.is_empty())
            {
                Some(g) => g.count += k32,
                None => groups.push(LaunchGroup {
                    offer: t,
                    count: k32,
                    holds: Vec::new(),
                }),
            }
        }
    }

    // Per class, per offer: sessions held.
    let mut held = vec![0u64; n_classes * n_offers];
    for g in &groups {
        for &(c, n) in &g.holds {
            held[c * n_offers + g.offer] += u64::from(n) * u64::from(g.count);
        }
    }
    // Held sessions of a class never exceed its count, a u32; so neither does what is left.
    let narrow = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    let served = (0..n_classes)
        .map(|c| {
            (0..n_offers)
                .filter(|&t| held[c * n_offers + t] > 0)
                .map(|t| (t, narrow(held[c * n_offers + t])))
                .collect()
        })
        .collect();
    Pack {
        launches: launched,
        served,
        unserved: rem.into_iter().map(narrow).collect(),
        groups,
        headroom_short: short.into_boxed_slice(),
    }
}

/// The LP lower bound on the price per hour of any pack of `demand`:
/// `min Σ price_t·x_t` s.t. `Σ_t slots_t[s]·x_t ≥ demand[s]` for every slot `s`, `x ≥ 0`
/// (fractional instances; `available` and the node budget are ignored).
///
/// `None` when some demanded slot is offered by no template (infeasible). The value comes from a
/// dual solution repaired to be exactly feasible, so it is a true lower bound even where the LP
/// solver rounds; should the solver fail, a weaker but still valid bound is returned. Offers with
/// a negative or non-finite price are left out, as in [`pack`].
///
/// This bound lets one session take its GPU from one template and its memory from another, so
/// on mixes of GPU and CPU-only sessions it sits well below any real pack (about 8% below
/// [`class_lower_bound`] on the benchmark mix, `workload::scale_out_problem`); the latter is the
/// reference for packing quality.
pub fn lower_bound(demand: &[u128], offers: &[Offer]) -> Option<f64> {
    let width = offers
        .iter()
        .map(|o| o.slots.len())
        .chain(std::iter::once(demand.len()))
        .max()
        .unwrap_or(0);
    let caps = flat(offers.iter().map(|o| &o.slots[..]), width);
    let d: Vec<f64> = (0..width)
        .map(|s| demand.get(s).map_or(0.0, |&x| x as f64))
        .collect();
    let prices: Vec<f64> = offers.iter().map(|o| o.price_per_hour).collect();
    let usable: Vec<bool> = prices.iter().map(|&p| valid_price(p)).collect();
    let y = slot_prices(&d, &caps, &prices, &usable, width)?;
    Some(d.iter().zip(&y).map(|(d, y)| d * y).sum())
}

/// A tighter lower bound than [`lower_bound`] on the price per hour of packing `classes`: the
/// class-assignment LP, in which every session sits whole on one (fractional) instance of an offer
/// it fits, so that no session's shares are split across templates. Ignores `available` and the
/// node budget.
///
/// `None` when some class with sessions fits in no offer. A true lower bound (from a repaired
/// dual solution), also should the LP solver fail, when it is weaker.
pub fn class_lower_bound(classes: &[DemandClass], offers: &[Offer]) -> Option<f64> {
    let width = classes
        .iter()
        .map(|c| c.need.len())
        .chain(offers.iter().map(|o| o.slots.len()))
        .max()
        .unwrap_or(0);
    let needs = flat(classes.iter().map(|c| &c.need[..]), width);
    let caps = flat(offers.iter().map(|o| &o.slots[..]), width);
    let prices: Vec<f64> = offers.iter().map(|o| o.price_per_hour).collect();
    let usable: Vec<bool> = prices.iter().map(|&p| valid_price(p)).collect();
    let counts: Vec<u64> = classes.iter().map(|c| u64::from(c.count)).collect();
    let fit = fit_matrix(&needs, classes.len(), &caps, &usable, width);
    let n_offers = offers.len();
    let unservable = (0..classes.len())
        .any(|c| counts[c] > 0 && !fit[c * n_offers..(c + 1) * n_offers].contains(&true));
    if unservable {
        return None;
    }
    let lp = class_prices(&needs, &counts, &caps, &prices, &usable, &fit, width);
    Some(counts.iter().zip(&lp.pi).map(|(&n, p)| n as f64 * p).sum())
}

/// Scores this close (relatively) are a tie: round-off must not choose between equal fills.
const TIE: f64 = 1e-9;

/// Relative size of the tie-break term of a weight (see `tie` in [`pack`]).
const TIE_EPS: f64 = 1e-6;

/// The greedy's state over one call of [`pack`].
struct Greedy<'a> {
    width: usize,
    needs: &'a [u64],
    caps: &'a [u64],
    offers: &'a [Offer],
    usable: &'a [bool],
    fit: &'a [bool],
    work: &'a [f64],
    /// Per offer: the classes it fits, in fill order.
    orders: Vec<Vec<usize>>,
    node_budget: u32,
    rem: Vec<u64>,
    launched: Vec<u32>,
    total: u32,
    groups: Vec<LaunchGroup>,
}

/// How a fill shares one instance among classes (see [`Greedy::fill`]).
#[derive(Clone, Copy)]
enum Mode {
    /// As many of each class as fit, in order.
    Greedy,
    /// First at most one of each class, then as many as fit.
    OneEach,
    /// First at most half of what fits of each class, then as many as fit.
    HalfEach,
}

impl Greedy<'_> {
    /// Serves the classes in `order` (most work first), each in turn leading fills, until all are
    /// served, no offer that fits the lead can be launched, or the node budget is spent.
    fn run(&mut self, order: &[usize]) {
        let width = self.width;
        let n_offers = self.offers.len();
        let mut free = vec![0u64; width];
        let mut taken = vec![0u64; self.rem.len()];
        let mut trial: Vec<(usize, u64)> = Vec::new();
        let mut fills: Vec<Vec<(usize, u64)>> = vec![Vec::new(); n_offers];
        let mut cands: Vec<(usize, f64, f64)> = Vec::new();
        let mut next = 0;
        while self.total < self.node_budget {
            while next < order.len() && self.rem[order[next]] == 0 {
                next += 1;
            }
            let Some(&lead) = order.get(next) else { break };
            cands.clear();
            for (t, kept) in fills.iter_mut().enumerate() {
                if !self.usable[t]
                    || self.launched[t] >= self.offers[t].available
                    || !self.fit[lead * n_offers + t]
                {
                    continue;
                }
                let mut best: Option<f64> = None;
                for mode in [Mode::Greedy, Mode::OneEach, Mode::HalfEach] {
                    let fitted = self.fill(t, lead, mode, &mut free, &mut taken, &mut trial);
                    if best.is_none_or(|b| fitted > b) {
                        best = Some(fitted);
                        std::mem::swap(&mut trial, kept);
                    }
                }
                if let Some(fitted) = best {
                    cands.push((t, self.offers[t].price_per_hour / fitted, fitted));
                }
            }
            // Least price per work; on a tie, the fill with the most work (fewer, larger
            // instances), then the lower offer index.
            let low = cands.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
            let Some(&(t, _, _)) = cands
                .iter()
                .filter(|c| c.1 <= low * (1.0 + TIE))
                .max_by(|a, b| a.2.total_cmp(&b.2).then(b.0.cmp(&a.0)))
            else {
                // No offer that fits the lead can be launched any more: it stays unserved.
                next += 1;
                continue;
            };
            let fill = &fills[t];
            // k ≥ 1: the fill took at most the remaining sessions of each class, and both limits
            // were checked above.
            let k = fill
                .iter()
                .map(|&(c, n)| self.rem[c] / n)
                .min()
                .unwrap_or(0)
                .min(u64::from(self.offers[t].available - self.launched[t]))
                .min(u64::from(self.node_budget - self.total));
            // k is at most a u32 difference, and n at most a class's count, a u32.
            let k32 = u32::try_from(k).unwrap_or(u32::MAX);
            let mut exhausted = false;
            for &(c, n) in fill {
                self.rem[c] -= n * k;
                exhausted |= self.rem[c] == 0;
            }
            self.launched[t] += k32;
            self.total += k32;
            let mut holds: Vec<(usize, u32)> = fill
                .iter()
                .map(|&(c, n)| (c, u32::try_from(n).unwrap_or(u32::MAX)))
                .collect();
            holds.sort_unstable();
            self.groups.push(LaunchGroup {
                offer: t,
                count: k32,
                holds,
            });
            if exhausted {
                let rem = &self.rem;
                for o in &mut self.orders {
                    o.retain(|&c| rem[c] > 0);
                }
            }
        }
    }

    /// Serves more sessions, or as many for less.
    fn better_than(&self, other: &Greedy) -> bool {
        let unserved = |g: &Greedy| g.rem.iter().sum::<u64>();
        let cost = |g: &Greedy| -> f64 {
            g.launched
                .iter()
                .zip(g.offers)
                .map(|(&n, o)| f64::from(n) * o.price_per_hour)
                .sum()
        };
        (unserved(self), cost(self)) < (unserved(other), cost(other))
    }

    /// Fills one fresh instance of offer `t` with the remaining sessions: `lead` first, then the
    /// classes in the offer's order, each pass taking what `mode` allows of each class, a last
    /// pass as many as fit. Writes (class, sessions) to `out` and returns the fitted work.
    fn fill(
        &self,
        t: usize,
        lead: usize,
        mode: Mode,
        free: &mut [u64],
        taken: &mut [u64],
        out: &mut Vec<(usize, u64)>,
    ) -> f64 {
        let width = self.width;
        free.copy_from_slice(&self.caps[t * width..(t + 1) * width]);
        out.clear();
        let mut fitted = 0.0;
        let first = match mode {
            Mode::Greedy => None,
            m => Some(m),
        };
        for pass in [first, Some(Mode::Greedy)].into_iter().flatten() {
            let others = self.orders[t].iter().copied().filter(|&c| c != lead);
            for c in std::iter::once(lead).chain(others) {
                let left = self.rem[c] - taken[c];
                if left == 0 {
                    continue;
                }
                let need = &self.needs[c * width..(c + 1) * width];
                let room = fit_count(need, free);
                let n = match pass {
                    Mode::Greedy => room,
                    Mode::OneEach => room.min(1),
                    Mode::HalfEach => room.div_ceil(2),
                }
                .min(left);
                if n == 0 {
                    continue;
                }
                for (f, &x) in free.iter_mut().zip(need) {
                    *f -= x * n;
                }
                if taken[c] == 0 {
                    out.push((c, 0));
                }
                taken[c] += n;
                fitted += n as f64 * self.work[c];
            }
        }
        for (c, n) in out.iter_mut() {
            *n = taken[*c];
            taken[*c] = 0;
        }
        fitted
    }
}

fn valid_price(p: f64) -> bool {
    p.is_finite() && p >= 0.0
}

fn padded(v: &[u64], width: usize) -> Vec<u64> {
    let mut out = vec![0; width];
    out[..v.len()].copy_from_slice(v);
    out
}

/// Row-major `rows × width` copy, each row padded with zeros.
fn flat<'a>(rows: impl Iterator<Item = &'a [u64]>, width: usize) -> Vec<u64> {
    rows.flat_map(|r| padded(r, width)).collect()
}

/// How many copies of `need` fit in `free` (`u64::MAX` for an all-zero need).
#[inline]
fn fit_count(need: &[u64], free: &[u64]) -> u64 {
    need.iter()
        .zip(free)
        .filter(|(&n, _)| n > 0)
        .map(|(&n, &f)| f / n)
        .min()
        .unwrap_or(u64::MAX)
}

/// `fit[c * offers + t]`: class `c` fits in one instance of usable offer `t`.
fn fit_matrix(
    needs: &[u64],
    n_classes: usize,
    caps: &[u64],
    usable: &[bool],
    width: usize,
) -> Vec<bool> {
    let n_offers = usable.len();
    let mut fit = vec![false; n_classes * n_offers];
    for c in 0..n_classes {
        for t in 0..n_offers {
            fit[c * n_offers + t] = usable[t]
                && fits(
                    &needs[c * width..(c + 1) * width],
                    &caps[t * width..(t + 1) * width],
                );
        }
    }
    fit
}

/// Per slot, the largest capacity of a usable offer: the LP's unit for that slot.
fn units(caps: &[u64], usable: &[bool], width: usize) -> Vec<f64> {
    (0..width)
        .map(|s| {
            (0..usable.len())
                .filter(|&t| usable[t])
                .map(|t| caps[t * width + s])
                .max()
                .unwrap_or(0) as f64
        })
        .collect()
}

/// Prices from the class-assignment LP (see [`class_prices`]).
struct ClassPrices {
    /// Per class: the price of one session.
    pi: Vec<f64>,
    /// Offer-major (`mu[t * width + s]`): what offer `t` charges per thousandth of slot `s`.
    mu: Vec<f64>,
}

/// Prices of the class-assignment LP `min Σ_t p_t·x_t` s.t. each session of class `c` is on some
/// offer it fits (`Σ_t a_ct = n_c`) and `Σ_c need_c[s]·a_ct ≤ slots_t[s]·x_t`. Unlike the
/// aggregate LP of [`lower_bound`], it cannot split one session's shares across templates (say,
/// its GPU from a small GPU template and its memory from a memory template), so it prices classes
/// the way packing does.
///
/// Only `μ` comes from the LP (see [`offer_charges`]); it is repaired to be exactly feasible and
/// `π_c = min_t need_c·μ_t` over the offers `c` fits, so `Σ n_c·π_c` is a true lower bound however
/// `μ` was found. Beyond [`LP_CLASSES`] classes, the LP runs on merged classes of like shape,
/// since its time grows about with the square of its size: `μ` is then approximate (and the bound
/// a little weaker). Classes with no sessions or no fitting offer get 0.
fn class_prices(
    needs: &[u64],
    counts: &[u64],
    caps: &[u64],
    prices: &[f64],
    usable: &[bool],
    fit: &[bool],
    width: usize,
) -> ClassPrices {
    let n_offers = usable.len();
    let n_classes = counts.len();
    let need = |c: usize| &needs[c * width..(c + 1) * width];
    let cap = |t: usize| &caps[t * width..(t + 1) * width];
    let fits = |c: usize, t: usize| fit[c * n_offers + t];
    let servable: Vec<usize> = (0..n_classes)
        .filter(|&c| counts[c] > 0 && (0..n_offers).any(|t| fits(c, t)))
        .collect();
    let mut pi = vec![0.0; n_classes];
    if servable.is_empty() {
        return ClassPrices {
            pi,
            mu: vec![0.0; n_offers * width],
        };
    }
    let mut mu = if servable.len() > LP_CLASSES {
        let (m_needs, m_counts, m_fit) =
            merge_classes(needs, counts, fit, &servable, caps, usable, width);
        offer_charges(&m_needs, &m_counts, caps, prices, usable, &m_fit, width)
    } else {
        offer_charges(needs, counts, caps, prices, usable, fit, width)
    };
    // Repair: hold each offer's row exactly, then take the largest π that μ allows.
    for t in 0..n_offers {
        let row = &mut mu[t * width..(t + 1) * width];
        let used: f64 = row.iter().zip(cap(t)).map(|(m, &x)| m * x as f64).sum();
        if used > prices[t] {
            let scale = if prices[t] > 0.0 {
                prices[t] / used
            } else {
                0.0
            };
            for m in row.iter_mut() {
                *m *= scale;
            }
        }
    }
    for &c in &servable {
        pi[c] = (0..n_offers)
            .filter(|&t| fits(c, t))
            .map(|t| {
                need(c)
                    .iter()
                    .zip(&mu[t * width..(t + 1) * width])
                    .map(|(&x, m)| x as f64 * m)
                    .sum::<f64>()
            })
            .fold(f64::INFINITY, f64::min);
    }
    ClassPrices { pi, mu }
}

/// Size of the class-assignment LP, in classes, beyond which classes are merged for it.
const LP_CLASSES: usize = 100;

/// (fitting offers, size band per slot) → (count-weighted sum of the needs, count).
type Bands<'a> = BTreeMap<(&'a [bool], Vec<i64>), (Vec<u128>, u128)>;

/// Merges the `servable` classes into at most about [`LP_CLASSES`] of like shape: the same
/// fitting offers, and in every slot the same band of sizes (a quarter of a power of two, then
/// coarser until few enough). A merged class needs the count-weighted mean, rounded down, which
/// fits wherever all its members fit. Returns needs, counts and the fit matrix of the merged
/// classes.
fn merge_classes(
    needs: &[u64],
    counts: &[u64],
    fit: &[bool],
    servable: &[usize],
    caps: &[u64],
    usable: &[bool],
    width: usize,
) -> (Vec<u64>, Vec<u64>, Vec<bool>) {
    let n_offers = usable.len();
    let unit = units(caps, usable, width);
    let mut level = 0;
    loop {
        let per_octave = 4.0 / f64::from(1u32 << level);
        let mut merged: Bands = BTreeMap::new();
        for &c in servable {
            let need = &needs[c * width..(c + 1) * width];
            let band: Vec<i64> = need
                .iter()
                .zip(&unit)
                .map(|(&x, &u)| {
                    if x == 0 || u == 0.0 {
                        i64::MIN
                    } else {
                        ((x as f64 / u).log2() * per_octave).floor() as i64
                    }
                })
                .collect();
            let entry = merged
                .entry((&fit[c * n_offers..(c + 1) * n_offers], band))
                .or_insert_with(|| (vec![0; width], 0));
            for (a, &x) in entry.0.iter_mut().zip(need) {
                *a += u128::from(x) * u128::from(counts[c]);
            }
            entry.1 += u128::from(counts[c]);
        }
        if merged.len() <= LP_CLASSES || level >= 8 {
            let mut m_needs = Vec::with_capacity(merged.len() * width);
            let mut m_counts = Vec::with_capacity(merged.len());
            let mut m_fit = Vec::with_capacity(merged.len() * n_offers);
            for ((fits_row, _), (sum, count)) in merged {
                // The mean of needs that are u64 is a u64; count is positive (servable classes).
                m_needs.extend(
                    sum.iter()
                        .map(|&x| u64::try_from(x / count).unwrap_or(u64::MAX)),
                );
                m_counts.push(u64::try_from(count).unwrap_or(u64::MAX));
                m_fit.extend_from_slice(fits_row);
            }
            return (m_needs, m_counts, m_fit);
        }
        level += 1;
    }
}

/// `μ` (offer-major, per thousandth) from the dual of the class-assignment LP, solved directly
/// since microlp gives no duals: `max Σ_c n_c·π_c` s.t. `Σ_s slots_t[s]·μ_ts ≤ p_t` for every
/// offer, and `π_c ≤ Σ_s need_c[s]·μ_ts` for every offer `t` that `c` fits; `π, μ ≥ 0`. Falls
/// back to the aggregate LP's slot prices, the same for every offer, should the solver fail.
/// Not yet repaired: may exceed an offer's price by the solver's tolerance.
fn offer_charges(
    needs: &[u64],
    counts: &[u64],
    caps: &[u64],
    prices: &[f64],
    usable: &[bool],
    fit: &[bool],
    width: usize,
) -> Vec<f64> {
    let n_offers = usable.len();
    let n_classes = counts.len();
    let need = |c: usize| &needs[c * width..(c + 1) * width];
    let cap = |t: usize| &caps[t * width..(t + 1) * width];
    let fits = |c: usize, t: usize| fit[c * n_offers + t];
    let servable: Vec<usize> = (0..n_classes)
        .filter(|&c| counts[c] > 0 && (0..n_offers).any(|t| fits(c, t)))
        .collect();
    let mut mu = vec![0.0; n_offers * width];
    let unit = units(caps, usable, width);

    // μ_ts is needed only where some class that fits t needs s; elsewhere 0 loses nothing.
    let mut wanted = vec![false; n_offers * width];
    for &c in &servable {
        for t in (0..n_offers).filter(|&t| fits(c, t)) {
            for s in (0..width).filter(|&s| need(c)[s] > 0) {
                wanted[t * width + s] = true;
            }
        }
    }
    let top = servable.iter().map(|&c| counts[c]).max().unwrap_or(1) as f64;
    let mut lp = Problem::new(OptimizationDirection::Maximize);
    let pi_var: Vec<_> = servable
        .iter()
        .map(|&c| lp.add_var(counts[c] as f64 / top, (0.0, f64::INFINITY)))
        .collect();
    // Scaled by the slot's unit (z_ts = μ_ts·unit_s) so that coefficients lie in [0, 1].
    let mu_var: Vec<Option<_>> = wanted
        .iter()
        .map(|&w| w.then(|| lp.add_var(0.0, (0.0, f64::INFINITY))))
        .collect();
    for t in 0..n_offers {
        let row: Vec<_> = (0..width)
            .filter_map(|s| mu_var[t * width + s].map(|v| (v, cap(t)[s] as f64 / unit[s])))
            .collect();
        if !row.is_empty() {
            lp.add_constraint(row.as_slice(), ComparisonOp::Le, prices[t]);
        }
    }
    for (i, &c) in servable.iter().enumerate() {
        for t in (0..n_offers).filter(|&t| fits(c, t)) {
            let mut row = vec![(pi_var[i], 1.0)];
            for s in (0..width).filter(|&s| need(c)[s] > 0) {
                // Wanted, hence present, by construction above.
                if let Some(v) = mu_var[t * width + s] {
                    row.push((v, -(need(c)[s] as f64) / unit[s]));
                }
            }
            lp.add_constraint(row.as_slice(), ComparisonOp::Le, 0.0);
        }
    }
    match lp.solve().ok().and_then(|o| o.into_solution().ok()) {
        Some(sol) => {
            for (i, v) in mu_var.iter().enumerate() {
                if let Some(v) = v {
                    mu[i] = (sol.var_value(*v) / unit[i % width]).max(0.0);
                }
            }
        }
        None => {
            let mut demand = vec![0.0; width];
            for &c in &servable {
                for (d, &x) in demand.iter_mut().zip(need(c)) {
                    *d += x as f64 * counts[c] as f64;
                }
            }
            let y = slot_prices(&demand, caps, prices, usable, width).unwrap_or(vec![0.0; width]);
            for t in (0..n_offers).filter(|&t| usable[t]) {
                mu[t * width..(t + 1) * width].copy_from_slice(&y);
            }
        }
    }
    mu
}

/// Price per thousandth of each slot: an optimal solution `y` of the dual LP
/// `max Σ demand_s·y_s` s.t. `Σ_s caps_t[s]·y_s ≤ price_t` for every usable offer `t`, `y ≥ 0`,
/// repaired to be exactly feasible. `None` when a demanded slot is in no usable offer.
fn slot_prices(
    demand: &[f64],
    caps: &[u64],
    prices: &[f64],
    usable: &[bool],
    width: usize,
) -> Option<Vec<f64>> {
    let cap = |t: usize| &caps[t * width..(t + 1) * width];
    let offers: Vec<usize> = (0..prices.len()).filter(|&t| usable[t]).collect();
    // Scale each slot to its largest template so that the LP's coefficients lie in [0, 1].
    let unit: Vec<f64> = (0..width)
        .map(|s| offers.iter().map(|&t| cap(t)[s]).max().unwrap_or(0) as f64)
        .collect();
    let active: Vec<usize> = (0..width).filter(|&s| demand[s] > 0.0).collect();
    if active.iter().any(|&s| unit[s] == 0.0) {
        return None;
    }
    let mut y = vec![0.0; width];
    if active.is_empty() {
        return Some(y);
    }
    let objective: Vec<f64> = active.iter().map(|&s| demand[s] / unit[s]).collect();
    let top = objective.iter().copied().fold(0.0, f64::max);

    let mut lp = Problem::new(OptimizationDirection::Maximize);
    let vars: Vec<_> = objective
        .iter()
        .map(|&c| lp.add_var(c / top, (0.0, f64::INFINITY)))
        .collect();
    for &t in &offers {
        let row: Vec<_> = active
            .iter()
            .zip(&vars)
            .filter(|(&s, _)| cap(t)[s] > 0)
            .map(|(&s, &v)| (v, cap(t)[s] as f64 / unit[s]))
            .collect();
        if !row.is_empty() {
            lp.add_constraint(row.as_slice(), ComparisonOp::Le, prices[t]);
        }
    }
    let solved = lp.solve().ok().and_then(|o| o.into_solution().ok());
    for (i, &s) in active.iter().enumerate() {
        let z = match &solved {
            Some(sol) => sol.var_value(vars[i]),
            // A feasible fallback: each slot takes at most 1/|active| of every offer's price.
            None => {
                offers
                    .iter()
                    .filter(|&&t| cap(t)[s] > 0)
                    .map(|&t| prices[t] * unit[s] / cap(t)[s] as f64)
                    .fold(f64::INFINITY, f64::min)
                    / active.len() as f64
            }
        };
        y[s] = (z / unit[s]).max(0.0);
    }

    // Repair: any y with every offer's shares priced at most its price bounds every pack from
    // below (weak duality), so hold y to that exactly rather than within the solver's tolerance.
    for &t in &offers {
        if prices[t] == 0.0 {
            for (y, &x) in y.iter_mut().zip(cap(t)) {
                if x > 0 {
                    *y = 0.0;
                }
            }
        }
    }
    let worst = offers
        .iter()
        .filter(|&&t| prices[t] > 0.0)
        .map(|&t| {
            let used: f64 = (0..width).map(|s| cap(t)[s] as f64 * y[s]).sum();
            used / prices[t]
        })
        .fold(0.0, f64::max);
    if worst > 1.0 {
        for x in &mut y {
            *x /= worst;
        }
    }
    Some(y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v(x: &[u64]) -> Vector {
        x.to_vec().into_boxed_slice()
    }

    fn class(need: &[u64], count: u32) -> DemandClass {
        DemandClass {
            need: v(need),
            count,
        }
    }

    fn offer(slots: &[u64], price: f64, available: u32) -> Offer {
        Offer {
            slots: v(slots),
            price_per_hour: price,
            available,
        }
    }

    #[test]
    fn three_one_gpu_sessions_take_one_four_gpu_instance() {
        // One slot, gpu, in thousandths.
        let offers = [offer(&[1000], 1.0, 10), offer(&[4000], 3.0, 10)];
        let classes = [class(&[1000], 3)];
        let p = pack(&classes, &offers, 100, &[0]);
        assert_eq!(p.launches, [0, 1]);
        assert_eq!(p.served, [vec![(1, 3)]]);
        assert_eq!(p.unserved, [0]);
        assert_eq!(p.cost(&offers), 3.0);
        assert_eq!(
            p.groups,
            [LaunchGroup {
                offer: 1,
                count: 1,
                holds: vec![(0, 3)],
            }]
        );

        // Five sessions: one 4-GPU instance and one 1-GPU instance, not two 4-GPU ones.
        let classes = [class(&[1000], 5)];
        let p = pack(&classes, &offers, 100, &[0]);
        assert_eq!(p.launches, [1, 1]);
        assert_eq!(p.cost(&offers), 4.0);
    }

    #[test]
    fn sessions_of_two_shapes_share_instances() {
        // cpu, mem. A cpu-heavy and a memory-heavy session fill one balanced instance exactly;
        // alone, each kind would waste half of one.
        let offers = [offer(&[4000, 4000], 1.0, 10), offer(&[8000, 8000], 2.1, 10)];
        let classes = [class(&[3000, 1000], 4), class(&[1000, 3000], 4)];
        let p = pack(&classes, &offers, 100, &[0, 0]);
        assert_eq!(p.launches, [4, 0]);
        assert_eq!(p.unserved, [0, 0]);
        for g in &p.groups {
            assert_eq!(g.holds, [(0, 1), (1, 1)]);
        }
    }

    #[test]
    fn limits_are_never_exceeded_and_the_rest_is_unserved() {
        let offers = [offer(&[1000], 1.0, 3), offer(&[4000], 3.0, 1)];
        let classes = [class(&[1000], 10)];

        // Node budget 3: the 4-GPU instance (4 sessions) and two 1-GPU ones.
        let p = pack(&classes, &offers, 3, &[0]);
        assert_eq!(p.launches, [2, 1]);
        assert_eq!(p.served, [vec![(0, 2), (1, 4)]]);
        assert_eq!(p.unserved, [4]);

        // Budget no object: every available instance, 7 sessions, 3 left.
        let p = pack(&classes, &offers, 100, &[0]);
        assert_eq!(p.launches, [3, 1]);
        assert_eq!(p.unserved, [3]);

        // No budget at all: nothing launched, everything unserved.
        let p = pack(&classes, &offers, 0, &[0]);
        assert_eq!(p.launches, [0, 0]);
        assert_eq!(p.unserved, [10]);
        assert!(p.groups.is_empty());
    }

    #[test]
    fn a_class_that_fits_no_offer_is_unserved_and_launches_nothing() {
        let offers = [offer(&[1000, 8000], 1.0, 10)];
        // Two GPUs where the largest template has one.
        let classes = [class(&[2000, 1000], 5)];
        let p = pack(&classes, &offers, 100, &[0, 0]);
        assert_eq!(p.launches, [0]);
        assert_eq!(p.served, [Vec::<(usize, u32)>::new()]);
        assert_eq!(p.unserved, [5]);

        // Beside one that fits, only the one that fits is planned for.
        let classes = [class(&[2000, 1000], 5), class(&[1000, 1000], 2)];
        let p = pack(&classes, &offers, 100, &[0, 0]);
        assert_eq!(p.launches, [2]);
        assert_eq!(p.unserved, [5, 0]);
        assert_eq!(p.served[1], [(0, 2)]);
    }

    #[test]
    fn offers_with_an_invalid_price_are_never_launched() {
        let offers = [
            offer(&[1000], f64::NAN, 10),
            offer(&[1000], -1.0, 10),
            offer(&[1000], 2.0, 10),
        ];
        let p = pack(&[class(&[1000], 2)], &offers, 100, &[0]);
        assert_eq!(p.launches, [0, 0, 2]);
    }

    #[test]
    fn headroom_launches_extra_capacity_only_when_the_leftover_falls_short() {
        let offers = [offer(&[4000], 1.0, 10)];
        let classes = [class(&[2000], 1)];
        // One instance, 2 cpu left: covers a deficit of up to 2 cpu.
        for deficit in [0, 1000, 2000] {
            let p = pack(&classes, &offers, 100, &[deficit]);
            assert_eq!(p.launches, [1], "deficit {deficit}");
            assert_eq!(&*p.headroom_short, &[0]);
        }
        // 3 cpu: one more instance.
        let p = pack(&classes, &offers, 100, &[3000]);
        assert_eq!(p.launches, [2]);
        assert_eq!(&*p.headroom_short, &[0]);
        assert!(p.groups.iter().any(|g| g.holds.is_empty() && g.count == 1));
        // 10 cpu: two more (2 + 2·4 ≥ 10).
        let p = pack(&classes, &offers, 100, &[10_000]);
        assert_eq!(p.launches, [3]);
        // Headroom alone, no demand.
        let p = pack(&[], &offers, 100, &[5000]);
        assert_eq!(p.launches, [2]);
        // The budget stops it; what is missing is reported.
        let p = pack(&classes, &offers, 1, &[3000]);
        assert_eq!(p.launches, [1]);
        assert_eq!(&*p.headroom_short, &[1000]);
        // A slot no offer has can't be covered.
        let p = pack(&classes, &offers, 100, &[0, 7]);
        assert_eq!(p.launches, [1]);
        assert_eq!(&*p.headroom_short, &[0, 7]);
    }

    #[test]
    fn lower_bound_matches_a_hand_solved_lp() {
        // cpu, mem. a: (4, 8) at 1.0; b: (8, 8) at 1.5. Demand (12, 20):
        // min a + 1.5b s.t. 4a + 8b ≥ 12, 8a + 8b ≥ 20: optimum at a = 2, b = 0.5, cost 2.75.
        let offers = [offer(&[4000, 8000], 1.0, 0), offer(&[8000, 8000], 1.5, 0)];
        let lb = lower_bound(&[12_000, 20_000], &offers).unwrap();
        assert!((lb - 2.75).abs() < 1e-9, "{lb}");
        assert_eq!(lower_bound(&[0, 0], &offers), Some(0.0));
        // A demanded slot that no offer has.
        assert_eq!(lower_bound(&[1000, 0, 5], &offers), None);
        // With real byte counts (thousandths of bytes), the scaling keeps the LP sound.
        let gib = 1000u64 << 30;
        let offers = [
            offer(&[2000, 4 * gib], 0.085, 0),
            offer(&[2000, 16 * gib], 0.126, 0),
        ];
        let lb = lower_bound(&[2000 * 100, 16 * gib as u128 * 100], &offers).unwrap();
        assert!((lb - 12.6).abs() < 1e-6, "{lb}");
    }

    #[test]
    fn class_lower_bound_is_tighter_and_still_below_the_pack() {
        // A session needs its GPU and its memory in one instance: the aggregate bound may take the
        // GPU from a cheap small template and the memory from a memory template.
        let offers = [
            offer(&[1000, 16_000], 0.5, 100),
            offer(&[0, 64_000], 0.4, 100),
            offer(&[1000, 64_000], 1.2, 100),
        ];
        let classes = [class(&[1000, 64_000], 10)];
        let lb = lower_bound(&[10_000, 640_000], &offers).unwrap();
        let clb = class_lower_bound(&classes, &offers).unwrap();
        let cost = pack(&classes, &offers, 100, &[0, 0]).cost(&offers);
        assert!((lb - 0.5 * 10.0 - 0.4 * 7.5).abs() < 1e-9, "{lb}");
        assert!((clb - 12.0).abs() < 1e-9, "{clb}");
        assert!((cost - 12.0).abs() < 1e-9, "{cost}");
        assert_eq!(class_lower_bound(&[class(&[2000, 0], 1)], &offers), None);
        assert_eq!(
            class_lower_bound(&[class(&[2000, 0], 0)], &offers),
            Some(0.0)
        );
    }

    #[test]
    fn a_realistic_mix_packs_within_ten_percent_of_the_class_bound() {
        let (classes, offers) = crate::workload::scale_out_problem(20_000, 7);
        assert_eq!(
            classes.iter().map(|c| c.count as usize).sum::<usize>(),
            20_000
        );
        assert!(classes.iter().all(|c| c.need.len() == 3));
        assert_eq!(offers.len(), 20);

        let p = pack(&classes, &offers, u32::MAX, &[0, 0, 0]);
        assert_eq!(p, pack(&classes, &offers, u32::MAX, &[0, 0, 0]));
        assert!(p.unserved.iter().all(|&n| n == 0));
        let cost = p.cost(&offers);
        let clb = class_lower_bound(&classes, &offers).unwrap();
        let mut demand = [0u128; 3];
        for c in &classes {
            for (d, &x) in demand.iter_mut().zip(c.need.iter()) {
                *d += u128::from(x) * u128::from(c.count);
            }
        }
        let lb = lower_bound(&demand, &offers).unwrap();
        assert!(lb <= clb && clb <= cost, "{lb} {clb} {cost}");
        assert!(cost <= 1.10 * clb, "{cost} vs {clb}");
    }

    fn small_inputs() -> impl Strategy<Value = (Vec<DemandClass>, Vec<Offer>, u32, Vec<u64>)> {
        (1usize..=3).prop_flat_map(|width| {
            let need = prop::collection::vec(prop_oneof![Just(0u64), 1u64..=5000], width);
            let classes = prop::collection::vec(
                (need, 0u32..=20).prop_map(|(need, count)| DemandClass {
                    need: need.into_boxed_slice(),
                    count,
                }),
                0..=5,
            );
            let slots = prop::collection::vec(prop_oneof![Just(0u64), 1u64..=8000], width);
            let offers = prop::collection::vec(
                (slots, 0u32..=400, 0u32..=6).prop_map(|(slots, cents, available)| Offer {
                    slots: slots.into_boxed_slice(),
                    price_per_hour: f64::from(cents) / 100.0,
                    available,
                }),
                0..=4,
            );
            let deficit =
                prop::collection::vec(prop_oneof![3 => Just(0u64), 1 => 0u64..=9000], width);
            (classes, offers, 0u32..=12, deficit)
        })
    }

    /// Sessions and templates of real sizes: cpu and gpu in thousandths, mem in thousandths of
    /// a byte, so the LPs see coefficients across many orders of magnitude.
    fn real_inputs() -> impl Strategy<Value = (Vec<DemandClass>, Vec<Offer>, u32, Vec<u64>)> {
        const GIB: u64 = 1000 << 30;
        let need = (1u64..=32, 0u64..=4, 1u64..=256)
            .prop_map(|(cpu, gpu, mem)| vec![cpu * 500, gpu * 1000, mem * GIB / 2]);
        let classes = prop::collection::vec(
            (need, 0u32..=2000).prop_map(|(need, count)| DemandClass {
                need: need.into_boxed_slice(),
                count,
            }),
            0..=12,
        );
        let slots = (0u32..=6, 0u64..=8, 0u32..=4).prop_map(|(cpu, gpu, per)| {
            let cpu = 2u64 << cpu;
            vec![cpu * 1000, gpu * 1000, cpu * (2 << per) * GIB]
        });
        let offers = prop::collection::vec(
            (slots, 1u32..=5000, 0u32..=1000).prop_map(|(slots, cents, available)| Offer {
                slots: slots.into_boxed_slice(),
                price_per_hour: f64::from(cents) / 100.0,
                available,
            }),
            1..=8,
        );
        let deficit = prop_oneof![
            3 => Just(vec![0, 0, 0]),
            1 => (0u64..=64, 0u64..=2)
                .prop_map(|(cpu, gpu)| vec![cpu * 1000, gpu * 1000, cpu * GIB]),
        ];
        (classes, offers, 0u32..=5000, deficit)
    }

    proptest! {
        #[test]
        fn packs_are_sound((classes, offers, budget, deficit) in small_inputs()) {
            check_pack(&classes, &offers, budget, &deficit)?;
        }

        #[test]
        fn packs_of_real_sizes_are_sound((classes, offers, budget, deficit) in real_inputs()) {
            check_pack(&classes, &offers, budget, &deficit)?;
        }
    }

    /// What a user of [`pack`] relies on, checked on any input.
    // Indexing several tables by the same class, offer or slot reads better than zips here.
    #[allow(clippy::needless_range_loop)]
    fn check_pack(
        classes: &[DemandClass],
        offers: &[Offer],
        budget: u32,
        deficit: &[u64],
    ) -> Result<(), TestCaseError> {
        let p = pack(classes, offers, budget, deficit);
        let width = deficit.len();

        // Every session is served or unserved, once.
        prop_assert_eq!(p.served.len(), classes.len());
        for (c, class) in classes.iter().enumerate() {
            let served: u32 = p.served[c].iter().map(|&(_, n)| n).sum();
            prop_assert_eq!(served + p.unserved[c], class.count);
            let fits_some = offers.iter().any(|o| {
                valid_price(o.price_per_hour) && o.available > 0 && fits(&class.need, &o.slots)
            });
            if !fits_some {
                prop_assert_eq!(p.unserved[c], class.count);
            }
        }
        // Limits.
        prop_assert_eq!(p.launches.len(), offers.len());
        for (t, o) in offers.iter().enumerate() {
            prop_assert!(p.launches[t] <= o.available);
        }
        prop_assert!(p.launches.iter().map(|&n| u64::from(n)).sum::<u64>() <= u64::from(budget));

        // Each planned instance holds what it is given; the groups add up to the launches
        // and to `served`.
        let mut launched = vec![0u32; offers.len()];
        let mut held = vec![vec![0u32; offers.len()]; classes.len()];
        let mut free = vec![0u128; width];
        for g in &p.groups {
            prop_assert!(g.count > 0);
            launched[g.offer] += g.count;
            for s in 0..width {
                let used: u64 = g
                    .holds
                    .iter()
                    .map(|&(c, n)| classes[c].need[s] * u64::from(n))
                    .sum();
                prop_assert!(used <= offers[g.offer].slots[s]);
                free[s] += u128::from(offers[g.offer].slots[s] - used) * u128::from(g.count);
            }
            for &(c, n) in &g.holds {
                held[c][g.offer] += n * g.count;
            }
        }
        prop_assert_eq!(&launched, &p.launches);
        for c in 0..classes.len() {
            let listed: Vec<(usize, u32)> = (0..offers.len())
                .filter(|&t| held[c][t] > 0)
                .map(|t| (t, held[c][t]))
                .collect();
            prop_assert_eq!(&listed, &p.served[c]);
        }
        // What each offer's instances hold fits in their total capacity, slot by slot.
        let mut demand = vec![0u128; width];
        for (t, o) in offers.iter().enumerate() {
            for s in 0..width {
                let load: u128 = (0..classes.len())
                    .map(|c| u128::from(classes[c].need[s]) * u128::from(held[c][t]))
                    .sum();
                prop_assert!(load <= u128::from(o.slots[s]) * u128::from(p.launches[t]));
                demand[s] += load;
            }
        }
        // Headroom: the leftover covers the deficit but for what is reported short.
        for s in 0..width {
            prop_assert!(free[s] + u128::from(p.headroom_short[s]) >= u128::from(deficit[s]));
            prop_assert!(p.headroom_short[s] <= deficit[s]);
        }
        // No pack of the served sessions costs less than the LP bounds.
        let cost = p.cost(offers);
        if let Some(lb) = lower_bound(&demand, offers) {
            prop_assert!(cost >= lb - 1e-6, "cost {} < lower bound {}", cost, lb);
        }
        let served: Vec<DemandClass> = classes
            .iter()
            .enumerate()
            .map(|(c, class)| DemandClass {
                need: class.need.clone(),
                count: class.count - p.unserved[c],
            })
            .collect();
        let clb = class_lower_bound(&served, offers);
        prop_assert!(clb.is_some());
        if let Some(clb) = clb {
            prop_assert!(
                cost >= clb - 1e-6,
                "cost {} < class lower bound {}",
                cost,
                clb
            );
        }
        Ok(())
    }
}
