//! Tests of [`pack`](super::pack): worked examples, limits and headroom, packing quality against
//! the class bound on a realistic mix, and properties checked on random inputs of small and of
//! real sizes. The bounds' own tests are in `bounds.rs`.

use super::tables::valid_price;
use super::*;
use crate::dense::fits;
use proptest::prelude::*;

fn v(x: &[u64]) -> Vector {
    x.to_vec().into_boxed_slice()
}

pub(super) fn class(need: &[u64], count: u32) -> DemandClass {
    DemandClass {
        need: v(need),
        count,
    }
}

pub(super) fn offer(slots: &[u64], price: f64, available: u32) -> Offer {
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
    assert_eq!(p, super::solve(&classes, &offers, 100, &[0, 0], 2, None));

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
        let deficit = prop::collection::vec(prop_oneof![3 => Just(0u64), 1 => 0u64..=9000], width);
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
    fn a_remembered_pack_is_the_pack(
        (classes, offers, budget, deficit) in small_inputs(),
        (other_classes, other_offers, _, _) in small_inputs(),
    ) {
        let mut memo = PriceMemo::default();
        // Solved, then remembered, then other inputs between two askings of the first.
        for (c, o) in [(&classes, &offers), (&classes, &offers), (&other_classes, &other_offers), (&classes, &offers)] {
            prop_assert_eq!(
                pack_remembering(c, o, budget, &deficit, &mut memo),
                pack(c, o, budget, &deficit)
            );
        }
        // At most one entry per distinct input (none when nothing needed solving).
        prop_assert!(memo.len() <= 2);
    }

    #[test]
    fn a_pack_with_nothing_to_launch_is_what_every_step_would_say(
        (classes, mut offers, budget, deficit) in small_inputs()
    ) {
        let width = tables::width(&classes, &offers, deficit.len());
        // No launch allowed.
        prop_assert_eq!(
            pack(&classes, &offers, 0, &deficit),
            super::solve(&classes, &offers, 0, &deficit, width, None)
        );
        // Whatever fits (where no class fits a usable offer and no headroom is short, `pack`
        // answers without solving).
        prop_assert_eq!(
            pack(&classes, &offers, budget, &deficit),
            super::solve(&classes, &offers, budget, &deficit, width, None)
        );
        // No offer available.
        for o in &mut offers {
            o.available = 0;
        }
        prop_assert_eq!(
            pack(&classes, &offers, budget, &deficit),
            super::solve(&classes, &offers, budget, &deficit, width, None)
        );
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

#[test]
fn nothing_to_pack_is_what_every_step_would_say() {
    let offers = vec![offer(&[4, 8], 1.0, 3), offer(&[16, 64], 3.5, 0)];
    for deficit in [&[][..], &[0][..], &[0, 0, 0][..]] {
        let width = tables::width(&[], &offers, deficit.len());
        assert_eq!(
            pack(&[], &offers, 5, deficit),
            super::solve(&[], &offers, 5, deficit, width, None)
        );
    }
}
