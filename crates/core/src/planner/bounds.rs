//! Lower bounds on the price per hour of any pack: the aggregate LP over slots
//! ([`lower_bound`]) and the tighter class-assignment LP ([`class_lower_bound`]), the reference
//! for packing quality.

use super::prices::{class_prices, slot_prices};
use super::tables::{self, valid_price, Tables};
use super::{DemandClass, Offer};

/// The LP lower bound on the price per hour of any pack of `demand`:
/// `min Σ price_t·x_t` s.t. `Σ_t slots_t[s]·x_t ≥ demand[s]` for every slot `s`, `x ≥ 0`
/// (fractional instances; `available` and the node budget are ignored).
///
/// `None` when some demanded slot is offered by no template (infeasible). The value comes from a
/// dual solution repaired to be exactly feasible, so it is a true lower bound even where the LP
/// solver rounds; should the solver fail, a weaker but still valid bound is returned. Offers with
/// a negative or non-finite price are left out, as in [`pack`](super::pack).
///
/// This bound lets one session take its GPU from one template and its memory from another, so
/// on mixes of GPU and CPU-only sessions it sits well below any real pack (about 8% below
/// [`class_lower_bound`] on the benchmark mix, `workload::scale_out_problem`); the latter is the
/// reference for packing quality.
pub fn lower_bound(demand: &[u128], offers: &[Offer]) -> Option<f64> {
    let width = tables::width(&[], offers, demand.len());
    let t = Tables::new(&[], offers, width, |o| valid_price(o.price_per_hour));
    let d: Vec<f64> = (0..width)
        .map(|s| demand.get(s).map_or(0.0, |&x| x as f64))
        .collect();
    let y = slot_prices(&d, &t.caps, &t.prices, &t.usable, width)?;
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
    let width = tables::width(classes, offers, 0);
    let t = Tables::new(classes, offers, width, |o| valid_price(o.price_per_hour));
    let unservable =
        (0..t.n_classes()).any(|c| t.counts[c] > 0 && !(0..t.n_offers()).any(|o| t.fits(c, o)));
    if unservable {
        return None;
    }
    let lp = class_prices(&t);
    Some(
        t.counts
            .iter()
            .zip(&lp.pi)
            .map(|(&n, p)| n as f64 * p)
            .sum(),
    )
}

#[cfg(test)]
mod tests {
    use super::super::pack;
    use super::super::tests::{class, offer};
    use super::*;

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
}
