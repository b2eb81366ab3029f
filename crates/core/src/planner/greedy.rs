//! The greedy fill, in the manner of first-fit-decreasing: the class with the most work left
//! leads; every offer that fits it fills one fresh instance (the lead first, then the other
//! classes in the offer's order, in three ways of sharing the instance, the fullest kept); the
//! fill with the least price per fitted work wins and is committed as many times at once as the
//! remaining counts and the limits allow. It runs twice, with two orders of the classes within an
//! instance, and the better plan is kept.

use super::prices::ClassPrices;
use super::tables::Tables;
use super::{LaunchGroup, Offer};

/// What the greedy planned: the instances, and what they leave unserved.
pub(super) struct Filled {
    /// Per class: sessions no planned instance holds.
    pub rem: Vec<u64>,
    /// Per offer: instances planned.
    pub launched: Vec<u32>,
    /// Instances planned, all offers together.
    pub total: u32,
    pub groups: Vec<LaunchGroup>,
}

/// Fills instances of the offers with the classes' sessions, most `work` (per session) first,
/// within `offers[t].available` and `node_budget`.
pub(super) fn fill(
    t: &Tables,
    offers: &[Offer],
    lp: &ClassPrices,
    work: &[f64],
    node_budget: u32,
) -> Filled {
    let (width, n_offers) = (t.width, t.n_offers());
    // Most work first; ties by class index (the sort is stable).
    let mut order: Vec<usize> = (0..t.n_classes())
        .filter(|&c| t.counts[c] > 0 && (0..n_offers).any(|o| t.fits(c, o)))
        .collect();
    order.sort_by(|&a, &b| work[b].total_cmp(&work[a]));
    // Two fill orders per offer, each run in full, the better plan kept (more sessions served,
    // then cheaper): by work alone, and the classes the offer holds at the LP's price first
    // (efficiency `π_c / need_c·μ_t` ≤ 1, in steps of 2%), then by work. The first packs
    // single-family demand tighter, the second finds the mixes (GPU instances topped up with
    // CPU-only sessions) that the LP prices in; the greedy costs little beside the LP.
    let efficiency = |c: usize, o: usize| -> i64 {
        let mu = &lp.mu[o * width..(o + 1) * width];
        let charge: f64 = t.need(c).iter().zip(mu).map(|(&x, m)| x as f64 * m).sum();
        let eff = if charge > 0.0 { lp.pi[c] / charge } else { 1.0 };
        (eff.min(1.0) * 50.0).floor() as i64
    };
    let run = |by_efficiency: bool| {
        let orders: Vec<Vec<usize>> = (0..n_offers)
            .map(|o| {
                let mut mine: Vec<usize> =
                    order.iter().copied().filter(|&c| t.fits(c, o)).collect();
                if by_efficiency {
                    mine.sort_by_key(|&c| std::cmp::Reverse(efficiency(c, o)));
                }
                mine
            })
            .collect();
        let mut greedy = Greedy {
            width,
            needs: &t.needs,
            caps: &t.caps,
            offers,
            usable: &t.usable,
            fit: &t.fit,
            work,
            orders,
            node_budget,
            rem: t.counts.clone(),
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
    Filled {
        rem: best.rem,
        launched: best.launched,
        total: best.total,
        groups: best.groups,
    }
}

/// Scores this close (relatively) are a tie: round-off must not choose between equal fills.
const TIE: f64 = 1e-9;

/// The greedy's state over one run of [`fill`].
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
