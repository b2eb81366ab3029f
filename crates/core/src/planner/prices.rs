//! What things cost: the prices of demand classes and what each offer charges per unit of slot,
//! from the class-assignment LP (merging classes of like shape when there are many), slot prices
//! from the aggregate LP, and the tie-break term every weight carries.
//!
//! The LPs are solved with `microlp`. Every price here is repaired to be exactly feasible for its
//! LP's dual, so that the bounds built on it are true lower bounds whatever the solver's round-off.

use std::collections::BTreeMap;

use microlp::{ComparisonOp, OptimizationDirection, Problem};

use super::tables::{units, Tables};

/// Relative size of the tie-break term of a weight (see [`Tie`]).
const TIE_EPS: f64 = 1e-6;

/// The tie-break term of a weight: a tiny amount in fractions of the largest template, added to
/// every weight so that no weight is 0 and ties break by size.
pub(super) struct Tie {
    /// Per slot, the largest capacity of a usable offer.
    pub unit: Vec<f64>,
    /// The least positive price of a usable offer (1 when there is none).
    p0: f64,
}

impl Tie {
    pub fn new(t: &Tables) -> Self {
        let unit = units(&t.caps, &t.usable, t.width);
        let p0 = t
            .prices
            .iter()
            .zip(&t.usable)
            .filter(|&(&p, &u)| u && p > 0.0)
            .map(|(&p, _)| p)
            .fold(f64::INFINITY, f64::min);
        let p0 = if p0.is_finite() { p0 } else { 1.0 };
        Tie { unit, p0 }
    }

    /// The term for a vector of slots.
    pub fn of(&self, v: &[u64]) -> f64 {
        let size: f64 = v
            .iter()
            .zip(&self.unit)
            .filter(|(_, &u)| u > 0.0)
            .map(|(&x, &u)| x as f64 / u)
            .sum();
        TIE_EPS * self.p0 * (1e-3 + size)
    }
}

/// Prices from the class-assignment LP (see [`class_prices`]).
#[derive(Debug)]
pub(super) struct ClassPrices {
    /// Per class: the price of one session.
    pub pi: Vec<f64>,
    /// Offer-major (`mu[t * width + s]`): what offer `t` charges per thousandth of slot `s`.
    pub mu: Vec<f64>,
}

/// Prices of the class-assignment LP `min Σ_t p_t·x_t` s.t. each session of class `c` is on some
/// offer it fits (`Σ_t a_ct = n_c`) and `Σ_c need_c[s]·a_ct ≤ slots_t[s]·x_t`. Unlike the
/// aggregate LP of [`lower_bound`](super::lower_bound), it cannot split one session's shares across templates (say,
/// its GPU from a small GPU template and its memory from a memory template), so it prices classes
/// the way packing does.
///
/// Only `μ` comes from the LP (see [`offer_charges`]); it is repaired to be exactly feasible and
/// `π_c = min_t need_c·μ_t` over the offers `c` fits, so `Σ n_c·π_c` is a true lower bound however
/// `μ` was found. Beyond [`LP_CLASSES`] classes, the LP runs on merged classes of like shape,
/// since its time grows about with the square of its size: `μ` is then approximate (and the bound
/// a little weaker). Classes with no sessions or no fitting offer get 0.
pub(super) fn class_prices(tables: &Tables) -> ClassPrices {
    let Tables {
        width,
        needs,
        caps,
        prices,
        usable,
        counts,
        fit,
    } = tables;
    let width = *width;
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
pub(super) fn slot_prices(
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
