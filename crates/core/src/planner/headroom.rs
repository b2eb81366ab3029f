//! Headroom: the free capacity the planned instances leave, summed over them, against the group's
//! headroom deficit, and extra empty instances, cheapest per unit of deficit, where it falls short.

use super::greedy::Filled;
use super::prices::{slot_prices, Tie};
use super::tables::{padded, Tables};
use super::{LaunchGroup, Offer};

/// Plans empty instances until what all the planned instances leave free covers `deficit`, or a
/// limit binds. Returns, per slot, the part of the deficit still uncovered.
pub(super) fn cover(
    t: &Tables,
    offers: &[Offer],
    tie: &Tie,
    deficit: &[u64],
    node_budget: u32,
    plan: &mut Filled,
) -> Vec<u64> {
    let mut short = left_short(t, deficit, &plan.groups);
    if short.iter().any(|&r| r > 0) {
        launch_empty(t, offers, tie, node_budget, plan, &mut short);
    }
    short
}

/// Per slot, the part of `deficit` that the free capacity of the instances of `groups` leaves
/// uncovered.
fn left_short(t: &Tables, deficit: &[u64], groups: &[LaunchGroup]) -> Vec<u64> {
    let mut short = padded(deficit, t.width);
    for g in groups {
        let mut left: Vec<u128> = t.cap(g.offer).iter().map(|&x| u128::from(x)).collect();
        for &(c, n) in &g.holds {
            for (l, &x) in left.iter_mut().zip(t.need(c)) {
                // The fill only took what fits.
                *l -= u128::from(x) * u128::from(n);
            }
        }
        for (r, l) in short.iter_mut().zip(&left) {
            let covered = l.saturating_mul(u128::from(g.count));
            *r = u64::try_from(u128::from(*r).saturating_sub(covered)).unwrap_or(u64::MAX);
        }
    }
    short
}

/// Adds empty instances to `plan`, the cheapest per unit of `short` first, taking what each
/// covers off `short`, within the offers' availability and `node_budget`.
fn launch_empty(
    t: &Tables,
    offers: &[Offer],
    tie: &Tie,
    node_budget: u32,
    plan: &mut Filled,
    short: &mut [u64],
) {
    let width = t.width;
    let Filled {
        launched,
        total,
        groups,
        ..
    } = plan;
    // Slot prices for the deficit alone (zero where no offer has the slot: it stays short).
    let d: Vec<f64> = short
        .iter()
        .zip(&tie.unit)
        .map(|(&r, &u)| if u > 0.0 { r as f64 } else { 0.0 })
        .collect();
    let y = slot_prices(&d, &t.caps, &t.prices, &t.usable, width).unwrap_or(vec![0.0; width]);
    let weigh = |v: &[u64]| -> f64 {
        v.iter().zip(&y).map(|(&x, &y)| x as f64 * y).sum::<f64>() + tie.of(v)
    };
    let mut piece = vec![0u64; width];
    while *total < node_budget && short.iter().any(|&r| r > 0) {
        let mut best: Option<(usize, f64)> = None;
        for o in (0..t.n_offers()).filter(|&o| t.usable[o] && launched[o] < offers[o].available) {
            for s in 0..width {
                piece[s] = t.cap(o)[s].min(short[s]);
            }
            if piece.iter().all(|&x| x == 0) {
                continue;
            }
            let score = t.prices[o] / weigh(&piece);
            if best.is_none_or(|(_, b)| score < b) {
                best = Some((o, score));
            }
        }
        let Some((o, _)) = best else { break };
        let cap = t.cap(o);
        // As many copies as the deficit uses whole (at least one), within the limits.
        let k = (0..width)
            .filter(|&s| short[s] > 0 && cap[s] > 0)
            .map(|s| short[s] / cap[s])
            .min()
            .unwrap_or(0)
            .max(1)
            .min(u64::from(offers[o].available - launched[o]))
            .min(u64::from(node_budget - *total));
        // k ≤ a u32 difference.
        let k32 = u32::try_from(k).unwrap_or(u32::MAX);
        for (r, &x) in short.iter_mut().zip(cap) {
            *r = r.saturating_sub(x.saturating_mul(k));
        }
        launched[o] += k32;
        *total += k32;
        match groups
            .iter_mut()
            .find(|g| g.offer == o && g.holds.is_empty())
        {
            Some(g) => g.count += k32,
            None => groups.push(LaunchGroup {
                offer: o,
                count: k32,
                holds: Vec::new(),
            }),
        }
    }
}
