//! Scale-out planning: packs unmet demand onto instance templates at (nearly) the least price per
//! hour.
//!
//! Pure and deterministic: no IO, no clock, no randomness, no hash-map order. Slot arithmetic is
//! integer; `f64` is used only for prices, costs and weights.
//!
//! Method. The dual of the covering LP (`max Σ demand_s·y_s` s.t. `Σ_s slots_t[s]·y_s ≤ price_t`)
//! gives each slot a price `y_s`; a session's *work* is what its shares cost at those prices.
//! Then, greedily: for every offer, fill one fresh instance with the remaining demand
//! (first-fit-decreasing by work) and score it by price per fitted work; commit the best fill as
//! many times at once as the remaining counts and the limits allow. Iterations are about the
//! number of distinct fill patterns, not the number of instances, which keeps 100k sessions fast.
//! A score of 1 means the instance is as efficient as the LP optimum, so the pack's cost over
//! [`lower_bound`] stays close to a weighted mean of the chosen scores.

use microlp::{ComparisonOp, OptimizationDirection, Problem};
use serde::{Deserialize, Serialize};

use crate::dense::Vector;

/// One shape of unmet demand: the required shares of a session, and how many sessions need it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemandClass {
    pub need: Vector,
    pub count: u32,
}

/// A template the policy may launch now.
///
/// An offer whose price is negative or not finite is never launched and never priced (it would
/// make the cost minimum meaningless); the policy should reject such templates earlier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    pub slots: Vector,
    pub price_per_hour: f64,
    /// How many more instances of this template may be launched.
    pub available: u32,
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
    /// hold), by offer index, offers holding none left out.
    pub served: Vec<Vec<(usize, u32)>>,
    /// Per class: sessions no planned instance holds (limits hit, or fits no offer).
    pub unserved: Vec<u32>,
    /// The planned instances, grouped by identical contents: what the launches hold, instance by
    /// instance, so the policy can tell which sessions each new instance is meant for.
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
/// 0). When `node_budget` binds, the cheapest-per-work instances are still chosen first, so the
/// plan serves what it can at the best price rather than the most sessions.
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
    let deficit = padded(headroom_deficit, width);
    let (n_classes, n_offers) = (classes.len(), offers.len());
    let need = |c: usize| &needs[c * width..(c + 1) * width];
    let cap = |t: usize| &caps[t * width..(t + 1) * width];

    let usable: Vec<bool> = offers
        .iter()
        .map(|o| valid_price(o.price_per_hour) && o.available > 0)
        .collect();
    let prices: Vec<f64> = offers.iter().map(|o| o.price_per_hour).collect();
    let counts: Vec<u64> = classes.iter().map(|c| u64::from(c.count)).collect();
    let fit = fit_matrix(&needs, &caps, &usable, width);
    let servable: Vec<bool> = (0..n_classes)
        .map(|c| counts[c] > 0 && fit[c * n_offers..(c + 1) * n_offers].iter().any(|&f| f))
        .collect();
    let unit = units(&caps, &usable, width);
    let p0 = offers
        .iter()
        .zip(&usable)
        .filter(|(o, &u)| u && o.price_per_hour > 0.0)
        .map(|(o, _)| o.price_per_hour)
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
    let pi = class_prices(&needs, &counts, &caps, &prices, &usable, &fit, width);
    let work: Vec<f64> = (0..n_classes).map(|c| pi[c] + tie(need(c))).collect();

    // Largest work first; ties by class index (a stable sort keeps it deterministic).
    let mut order: Vec<usize> = (0..n_classes).filter(|&c| servable[c]).collect();
    order.sort_by(|&a, &b| work[b].total_cmp(&work[a]));

    let mut greedy = Greedy {
        width,
        needs: &needs,
        caps: &caps,
        offers,
        usable: &usable,
        work: &work,
        node_budget,
        rem: counts.clone(),
        launched: vec![0; n_offers],
        total: 0,
        groups: Vec::new(),
    };
    // Phase 1: each offer takes about the sessions the LP assigns to it.
    if let Some(a) = assignment(
        &needs,
        &counts,
        &caps,
        &prices,
        offers,
        &fit,
        node_budget,
        width,
    ) {
        let mut quota: Vec<u64> = a
            .iter()
            .map(|&x| (x - 1e-6).ceil().max(0.0) as u64)
            .collect();
        greedy.run(&order, Some(&mut quota));
    }
    // Phase 2: what rounding and packing left, by cost per work alone.
    greedy.run(&order, None);
    let Greedy {
        rem,
        mut launched,
        mut total,
        mut groups,
        ..
    } = greedy;
    for g in &mut groups {
        g.holds.sort_unstable();
    }

    // Headroom: what the planned instances leave free, summed, against the deficit.
    let mut short: Vec<u64> = deficit.clone();
    for g in &groups {
        let mut left: Vec<u128> = cap(g.offer).iter().map(|&x| u128::from(x)).collect();
        for &(c, n) in &g.holds {
            for (l, &x) in left.iter_mut().zip(need(c)) {
                *l -= u128::from(x) * u128::from(n);
            }
        }
        for (r, l) in short.iter_mut().zip(&left) {
            let covered = l.saturating_mul(u128::from(g.count));
            *r = u64::try_from(u128::from(*r).saturating_sub(covered)).unwrap_or(u64::MAX);
        }
    }
    // Slot prices for the deficit alone (zeros, leaving the tie-break, where none is offered).
    let y = if short.iter().any(|&r| r > 0) {
        let d: Vec<f64> = short.iter().map(|&r| r as f64).collect();
        let d: Vec<f64> = d
            .iter()
            .zip(&unit)
            .map(|(&d, &u)| if u > 0.0 { d } else { 0.0 })
            .collect();
        slot_prices(&d, &caps, &prices, &usable, width).unwrap_or(vec![0.0; width])
    } else {
        vec![0.0; width]
    };
    let weigh =
        |v: &[u64]| -> f64 { v.iter().zip(&y).map(|(&x, &y)| x as f64 * y).sum::<f64>() + tie(v) };
    let mut piece = vec![0u64; width];
    while total < node_budget && short.iter().any(|&r| r > 0) {
        let mut best: Option<(usize, f64)> = None;
        for t in 0..n_offers {
            if !usable[t] || launched[t] >= offers[t].available {
                continue;
            }
            for s in 0..width {
                piece[s] = cap(t)[s].min(short[s]);
            }
            if piece.iter().all(|&x| x == 0) {
                continue;
            }
            let score = offers[t].price_per_hour / weigh(&piece);
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
        let k32 = u32::try_from(k).unwrap_or(u32::MAX);
        for s in 0..width {
            short[s] = short[s].saturating_sub(cap(t)[s].saturating_mul(k));
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

    // Per class, per offer: sessions held.
    let mut held = vec![0u64; n_classes * n_offers];
    for g in &groups {
        for &(c, n) in &g.holds {
            held[c * n_offers + g.offer] += u64::from(n) * u64::from(g.count);
        }
    }
    let served = (0..n_classes)
        .map(|c| {
            (0..n_offers)
                .filter(|&t| held[c * n_offers + t] > 0)
                // Held sessions of a class never exceed its count, a u32.
                .map(|t| (t, u32::try_from(held[c * n_offers + t]).unwrap_or(u32::MAX)))
                .collect()
        })
        .collect();
    let unserved = rem
        .iter()
        .map(|&r| u32::try_from(r).unwrap_or(u32::MAX))
        .collect();
    Pack {
        launches: launched,
        served,
        unserved,
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

/// A tighter lower bound than [`lower_bound`] for the price per hour of packing `classes`: the
/// LP in which every session sits whole on one (fractional) instance of an offer it fits, so
/// that no session's shares are split across templates. Ignores `available` and the node budget.
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
    let fit = fit_matrix(&needs, &caps, &usable, width);
    let n_offers = offers.len();
    let unservable = (0..classes.len())
        .any(|c| counts[c] > 0 && !fit[c * n_offers..(c + 1) * n_offers].iter().any(|&f| f));
    if unservable {
        return None;
    }
    let pi = class_prices(&needs, &counts, &caps, &prices, &usable, &fit, width);
    Some(counts.iter().zip(&pi).map(|(&n, p)| n as f64 * p).sum())
}

/// A deterministic, realistic mix for benchmarks: `sessions` sessions drawn from `seed`, grouped
/// into classes (about 150 distinct shapes), and 20 AWS-like offers with on-demand prices.
///
/// Slot order of every vector: `["cpu", "gpu", "mem"]` (sorted, as [`crate::dense::SlotIndex`]
/// orders them); cpu and gpu in thousandths of a unit, mem in thousandths of a byte.
///
/// Sessions: 70% cpu-only (1-16 cpu, 1-8 GiB per cpu), 30% GPU (1-4 gpu, 4-8 cpu and 16-64 GiB
/// per gpu). Offers: c5/m5/r5 (2/4/8 GiB per vCPU, 2-96 vCPU), g4dn (1, 4 and 8 GPUs) and p3
/// (1, 4 and 8 GPUs); each with 100,000 available so that limits do not bind.
pub fn sample_mix(sessions: usize, seed: u64) -> (Vec<DemandClass>, Vec<Offer>) {
    const GIB: u64 = 1 << 30;
    let v = |cpu: u64, gpu: u64, mem_gib: u64| -> Vector {
        Box::new([cpu * 1000, gpu * 1000, mem_gib * GIB * 1000])
    };
    // (vCPU, GPU, GiB, price per hour)
    const TEMPLATES: [(u64, u64, u64, f64); 20] = [
        (2, 0, 4, 0.085),    // c5.large
        (8, 0, 16, 0.34),    // c5.2xlarge
        (36, 0, 72, 1.53),   // c5.9xlarge
        (96, 0, 192, 4.08),  // c5.24xlarge
        (2, 0, 8, 0.096),    // m5.large
        (8, 0, 32, 0.384),   // m5.2xlarge
        (32, 0, 128, 1.536), // m5.8xlarge
        (96, 0, 384, 4.608), // m5.24xlarge
        (2, 0, 16, 0.126),   // r5.large
        (16, 0, 128, 1.008), // r5.4xlarge
        (96, 0, 768, 6.048), // r5.24xlarge
        (4, 1, 16, 0.526),   // g4dn.xlarge
        (8, 1, 32, 0.752),   // g4dn.2xlarge
        (16, 1, 64, 1.204),  // g4dn.4xlarge
        (32, 1, 128, 2.176), // g4dn.8xlarge
        (48, 4, 192, 3.912), // g4dn.12xlarge
        (96, 8, 384, 7.824), // g4dn.metal
        (8, 1, 61, 3.06),    // p3.2xlarge
        (32, 4, 244, 12.24), // p3.8xlarge
        (64, 8, 488, 24.48), // p3.16xlarge
    ];
    let offers = TEMPLATES
        .iter()
        .map(|&(cpu, gpu, mem, price)| Offer {
            slots: v(cpu, gpu, mem),
            price_per_hour: price,
            available: 100_000,
        })
        .collect();

    const CPUS: [u64; 8] = [1, 2, 3, 4, 6, 8, 12, 16];
    const GIB_PER_CPU: [u64; 6] = [1, 2, 3, 4, 6, 8];
    const CPU_PER_GPU: [u64; 5] = [4, 5, 6, 7, 8];
    const GIB_PER_GPU: [u64; 5] = [16, 24, 32, 48, 64];
    let mut rng = SplitMix64(seed);
    let mut counts: std::collections::BTreeMap<(u64, u64, u64), u32> = Default::default();
    for _ in 0..sessions {
        let key = if rng.below(10) < 7 {
            let cpu = CPUS[rng.below(CPUS.len())];
            (cpu, 0, cpu * GIB_PER_CPU[rng.below(GIB_PER_CPU.len())])
        } else {
            let gpu = 1 + rng.below(4) as u64;
            let cpu = gpu * CPU_PER_GPU[rng.below(CPU_PER_GPU.len())];
            (cpu, gpu, gpu * GIB_PER_GPU[rng.below(GIB_PER_GPU.len())])
        };
        let n = counts.entry(key).or_insert(0);
        *n = n.saturating_add(1);
    }
    let classes = counts
        .into_iter()
        .map(|((cpu, gpu, mem), count)| DemandClass {
            need: v(cpu, gpu, mem),
            count,
        })
        .collect();
    (classes, offers)
}

/// The greedy's state over one call of [`pack`].
struct Greedy<'a> {
    width: usize,
    needs: &'a [u64],
    caps: &'a [u64],
    offers: &'a [Offer],
    usable: &'a [bool],
    work: &'a [f64],
    node_budget: u32,
    rem: Vec<u64>,
    launched: Vec<u32>,
    total: u32,
    groups: Vec<LaunchGroup>,
}

impl Greedy<'_> {
    /// Commits the best fill, as many times as it repeats, until nothing more fits or a limit is
    /// hit. With `quota` (offer-major: `quota[t * classes + c]`), offer `t` takes at most that
    /// many sessions of class `c`, and the quota shrinks as they are placed.
    fn run(&mut self, order: &[usize], mut quota: Option<&mut [u64]>) {
        let n_classes = self.rem.len();
        let width = self.width;
        let mut order: Vec<usize> = order.iter().copied().filter(|&c| self.rem[c] > 0).collect();
        let mut free = vec![0u64; width];
        let mut trial: Vec<(usize, u64)> = Vec::new();
        let mut best_fill: Vec<(usize, u64)> = Vec::new();
        while self.total < self.node_budget && !order.is_empty() {
            let mut best: Option<(usize, f64)> = None;
            for (t, offer) in self.offers.iter().enumerate() {
                if !self.usable[t] || self.launched[t] >= offer.available {
                    continue;
                }
                let q = quota
                    .as_deref()
                    .map(|q| &q[t * n_classes..(t + 1) * n_classes]);
                let fitted = fill(
                    &self.caps[t * width..(t + 1) * width],
                    &order,
                    self.needs,
                    width,
                    &self.rem,
                    q,
                    self.work,
                    &mut free,
                    &mut trial,
                );
                if trial.is_empty() {
                    continue;
                }
                let score = offer.price_per_hour / fitted;
                if best.is_none_or(|(_, b)| score < b) {
                    best = Some((t, score));
                    std::mem::swap(&mut trial, &mut best_fill);
                }
            }
            let Some((t, _sc)) = best else { break };
            #[cfg(test)]
            if std::env::var("PLANNER_DEBUG").is_ok() {
                let fitted: f64 = best_fill
                    .iter()
                    .map(|&(c, n)| n as f64 * self.work[c])
                    .sum();
                eprintln!(
                    "t {t} score {_sc:.4} loss/inst {:.4} fill {:?}",
                    self.offers[t].price_per_hour - fitted,
                    best_fill
                        .iter()
                        .map(|&(c, n)| (c, n, self.rem[c]))
                        .collect::<Vec<_>>()
                );
            }
            // k ≥ 1: the fill took at most the remaining sessions and quota of each class, and
            // both limits were checked above.
            let k = best_fill
                .iter()
                .map(|&(c, n)| {
                    let q = quota.as_deref().map_or(u64::MAX, |q| q[t * n_classes + c]);
                    self.rem[c].min(q) / n
                })
                .min()
                .unwrap_or(0)
                .min(u64::from(self.offers[t].available - self.launched[t]))
                .min(u64::from(self.node_budget - self.total));
            let k32 = u32::try_from(k).unwrap_or(u32::MAX);
            for &(c, n) in &best_fill {
                self.rem[c] -= n * k;
                if let Some(q) = quota.as_deref_mut() {
                    q[t * n_classes + c] -= n * k;
                }
            }
            self.launched[t] += k32;
            self.total += k32;
            self.groups.push(LaunchGroup {
                offer: t,
                count: k32,
                // n ≤ a class's count, a u32.
                holds: best_fill
                    .iter()
                    .map(|&(c, n)| (c, u32::try_from(n).unwrap_or(u32::MAX)))
                    .collect(),
            });
            let rem = &self.rem;
            order.retain(|&c| rem[c] > 0);
        }
    }
}

/// Sessions of each class on each offer (offer-major, `a[t * classes + c]`) in an optimum of the
/// class-assignment LP with the limits: `min Σ_t p_t·x_t + Σ_c λ_c·u_c` s.t.
/// `Σ_t a_ct + u_c = n_c`, `Σ_c need_c[s]·a_ct ≤ slots_t[s]·x_t`, `x_t ≤ available_t`,
/// `Σ_t x_t ≤ node_budget`, where the penalty `λ_c` on unserved sessions exceeds the price of a
/// whole instance for each. `None` should the solver fail.
#[allow(clippy::too_many_arguments)]
fn assignment(
    needs: &[u64],
    counts: &[u64],
    caps: &[u64],
    prices: &[f64],
    offers: &[Offer],
    fit: &[bool],
    node_budget: u32,
    width: usize,
) -> Option<Vec<f64>> {
    let n_offers = offers.len();
    let n_classes = counts.len();
    let usable: Vec<bool> = offers
        .iter()
        .map(|o| valid_price(o.price_per_hour) && o.available > 0)
        .collect();
    let unit = units(caps, &usable, width);
    let fits = |c: usize, t: usize| fit[c * n_offers + t];
    let mut lp = Problem::new(OptimizationDirection::Minimize);
    let x: Vec<_> = (0..n_offers)
        .map(|t| {
            let hi = if usable[t] {
                f64::from(offers[t].available)
            } else {
                0.0
            };
            lp.add_var(if usable[t] { prices[t] } else { 0.0 }, (0.0, hi))
        })
        .collect();
    let mut a = vec![None; n_offers * n_classes];
    for c in (0..n_classes).filter(|&c| counts[c] > 0) {
        let fitting: Vec<usize> = (0..n_offers).filter(|&t| fits(c, t)).collect();
        if fitting.is_empty() {
            continue;
        }
        let penalty = 2.0 * fitting.iter().map(|&t| prices[t]).fold(0.0, f64::max) + 1.0;
        let mut row = vec![(lp.add_var(penalty, (0.0, f64::INFINITY)), 1.0)];
        for &t in &fitting {
            let v = lp.add_var(0.0, (0.0, f64::INFINITY));
            a[t * n_classes + c] = Some(v);
            row.push((v, 1.0));
        }
        lp.add_constraint(row.as_slice(), ComparisonOp::Eq, counts[c] as f64);
    }
    for t in (0..n_offers).filter(|&t| usable[t]) {
        for s in 0..width {
            let mut row = Vec::new();
            for c in 0..n_classes {
                let x = needs[c * width + s];
                if let (Some(v), true) = (a[t * n_classes + c], x > 0) {
                    row.push((v, x as f64 / unit[s]));
                }
            }
            if !row.is_empty() {
                row.push((x[t], -(caps[t * width + s] as f64) / unit[s]));
                lp.add_constraint(row.as_slice(), ComparisonOp::Le, 0.0);
            }
        }
    }
    let room: f64 = (0..n_offers)
        .filter(|&t| usable[t])
        .map(|t| f64::from(offers[t].available))
        .sum();
    if f64::from(node_budget) < room {
        let row: Vec<_> = x.iter().map(|&v| (v, 1.0)).collect();
        lp.add_constraint(row.as_slice(), ComparisonOp::Le, f64::from(node_budget));
    }
    let sol = lp.solve().ok()?.into_solution().ok()?;
    Some(
        a.iter()
            .map(|v| v.map_or(0.0, |v| sol.var_value(v)))
            .collect(),
    )
}

/// Relative size of the tie-break term of a weight (see `weigh` in [`pack`]).
const TIE_EPS: f64 = 1e-6;

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

/// Fills one fresh instance of capacity `cap` with the remaining demand, first fit in `order`
/// (largest work first), as many of each class as fit. Writes (class, sessions) to `out` and
/// returns the fitted work.
#[allow(clippy::too_many_arguments)]
fn fill(
    cap: &[u64],
    order: &[usize],
    needs: &[u64],
    width: usize,
    rem: &[u64],
    quota: Option<&[u64]>,
    work: &[f64],
    free: &mut [u64],
    out: &mut Vec<(usize, u64)>,
) -> f64 {
    free.copy_from_slice(cap);
    out.clear();
    let mut fitted = 0.0;
    for &c in order {
        let r = quota.map_or(rem[c], |q| rem[c].min(q[c]));
        if r == 0 {
            continue;
        }
        let need = &needs[c * width..(c + 1) * width];
        let n = fit_count(need, free).min(r);
        if n == 0 {
            continue;
        }
        for (f, &x) in free.iter_mut().zip(need) {
            *f -= x * n;
        }
        out.push((c, n));
        fitted += n as f64 * work[c];
    }
    fitted
}

/// `fit[c * offers + t]`: class `c` fits in one instance of usable offer `t`.
fn fit_matrix(needs: &[u64], caps: &[u64], usable: &[bool], width: usize) -> Vec<bool> {
    let n_offers = usable.len();
    let n_classes = if width == 0 { 0 } else { needs.len() / width };
    let mut fit = vec![false; n_classes * n_offers];
    if width == 0 {
        // No slots at all: every class fits every usable offer.
        return fit;
    }
    for (c, need) in needs.chunks_exact(width).enumerate() {
        for (t, cap) in caps.chunks_exact(width).enumerate() {
            fit[c * n_offers + t] = usable[t] && crate::dense::fits(need, cap);
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

/// Price of one session of each class: an optimal dual of the class-assignment LP
/// `min Σ_t p_t·x_t` s.t. each session of class `c` is on some offer it fits
/// (`Σ_t a_ct = n_c`) and `Σ_c need_c[s]·a_ct ≤ slots_t[s]·x_t`. Unlike the aggregate LP of
/// [`lower_bound`], it cannot split one session's shares across instances (say, its GPU from a
/// small GPU template and its memory from a memory template), so it prices classes the way
/// packing does. The dual, solved directly (microlp gives no duals):
/// `max Σ_c n_c·π_c` s.t. `Σ_s slots_t[s]·μ_ts ≤ p_t` for every offer, and
/// `π_c ≤ Σ_s need_c[s]·μ_ts` for every offer `t` that `c` fits; `π, μ ≥ 0`.
/// `μ` is repaired to be exactly feasible and `π_c` recomputed from it, so `Σ n_c·π_c` is a true
/// lower bound. Classes with no sessions or no fitting offer get 0.
fn class_prices(
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
    let mut pi = vec![0.0; n_classes];
    if servable.is_empty() {
        return pi;
    }
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
    // Variables scaled by the slot's unit (z_ts = μ_ts·unit_s) so coefficients lie in [0, 1].
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

    let mut mu = vec![0.0; n_offers * width];
    match lp.solve().ok().and_then(|o| o.into_solution().ok()) {
        Some(sol) => {
            for (i, v) in mu_var.iter().enumerate() {
                if let Some(v) = v {
                    mu[i] = (sol.var_value(*v) / unit[i % width]).max(0.0);
                }
            }
        }
        None => {
            // The aggregate prices, the same for every offer, are also feasible here.
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
    // Repair: hold each offer's capacity row exactly, then take the largest π it allows.
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
    pi
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
            for s in 0..width {
                if cap(t)[s] > 0 {
                    y[s] = 0.0;
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

/// SplitMix64: a tiny seeded generator, so that sample mixes need no `rand`.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform-enough in `0..n` for sampling (n is tiny, so the modulo bias is negligible).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[cfg(test)]
mod measure {
    use super::*;

    /// Class-assignment LP: sessions may not split across instances.
    fn assign_lb(classes: &[DemandClass], offers: &[Offer]) -> f64 {
        let mut lp = Problem::new(OptimizationDirection::Minimize);
        let x: Vec<_> = offers
            .iter()
            .map(|o| lp.add_var(o.price_per_hour, (0.0, f64::INFINITY)))
            .collect();
        let w = 3;
        let unit: Vec<f64> = (0..w)
            .map(|s| offers.iter().map(|o| o.slots[s]).max().unwrap() as f64)
            .collect();
        let mut a = vec![vec![None; offers.len()]; classes.len()];
        for (c, cl) in classes.iter().enumerate() {
            for (t, o) in offers.iter().enumerate() {
                if crate::dense::fits(&cl.need, &o.slots) {
                    a[c][t] = Some(lp.add_var(0.0, (0.0, f64::INFINITY)));
                }
            }
            let row: Vec<_> = a[c].iter().flatten().map(|&v| (v, 1.0)).collect();
            lp.add_constraint(row.as_slice(), ComparisonOp::Eq, cl.count as f64);
        }
        for (t, o) in offers.iter().enumerate() {
            for s in 0..w {
                let mut row: Vec<_> = vec![(x[t], -(o.slots[s] as f64) / unit[s])];
                for (c, cl) in classes.iter().enumerate() {
                    if let Some(v) = a[c][t] {
                        if cl.need[s] > 0 {
                            row.push((v, cl.need[s] as f64 / unit[s]));
                        }
                    }
                }
                lp.add_constraint(row.as_slice(), ComparisonOp::Le, 0.0);
            }
        }
        lp.solve().unwrap().into_solution().unwrap().objective()
    }

    #[test]
    #[ignore]
    fn measure_mix() {
        for kind in 0..3 {
            for seed in [1u64, 2] {
                for n in [1_000usize, 100_000] {
                    let (mut classes, offers) = sample_mix(n, seed);
                    if kind == 1 {
                        classes.retain(|c| c.need[1] == 0);
                    } else if kind == 2 {
                        classes.retain(|c| c.need[1] > 0);
                    }
                    let t0 = std::time::Instant::now();
                    let mut p = pack(&classes, &offers, u32::MAX, &[0, 0, 0]);
                    let reps = 20;
                    for _ in 1..reps {
                        p = pack(&classes, &offers, u32::MAX, &[0, 0, 0]);
                    }
                    let dt = t0.elapsed() / reps;
                    let mut d = vec![0u128; 3];
                    for c in &classes {
                        for s in 0..3 {
                            d[s] += c.need[s] as u128 * c.count as u128;
                        }
                    }
                    let lb = lower_bound(&d, &offers).unwrap();
                    let t1 = std::time::Instant::now();
                    let alb = assign_lb(&classes, &offers);
                    let clb = class_lower_bound(&classes, &offers).unwrap();
                    assert!((clb - alb).abs() < 1e-6 * alb, "{clb} vs {alb}");
                    let dta = t1.elapsed();
                    let cost = p.cost(&offers);
                    println!(
                        "kind {kind} seed {seed} n {n} classes {} groups {} cost {cost:.3} lb {lb:.3} ratio {:.4} alb {alb:.3} ratio {:.4} ({dta:?}) time {:?} unserved {}",
                        classes.len(),
                        p.groups.len(),
                        cost / lb,
                        cost / alb,
                        dt,
                        p.unserved.iter().sum::<u32>()
                    );
                }
            }
        }
    }
}
#[cfg(test)]
mod dbg {
    use super::*;
    #[test]
    #[ignore]
    fn dbg_mix() {
        let (classes, offers) = sample_mix(100_000, 1);
        for (i, c) in classes.iter().enumerate() {
            eprintln!(
                "class {i} cpu {} gpu {} mem {} n {}",
                c.need[0] / 1000,
                c.need[1] / 1000,
                c.need[2] / 1000 / (1 << 30),
                c.count
            );
        }
        let p = pack(&classes, &offers, u32::MAX, &[0, 0, 0]);
        eprintln!("{:?}", p.launches);
    }
}
