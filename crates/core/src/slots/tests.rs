//! The tests of `slots`: amounts and sets parsed, printed and summed; errors naming the part; JSON.

use super::*;

fn q(slot: &str, text: &str) -> Result<u64, SlotError> {
    Quantity::parse(slot, text).map(Quantity::milli)
}

fn slots(text: &str) -> Slots {
    text.parse().expect("slots")
}

#[test]
fn sums_in_place_add_and_remove_names_and_a_refused_one_changes_nothing() {
    let mut held = slots("cpu=2,mem=4GiB");
    held.try_add(&slots("cpu=1,gpu=1")).expect("room");
    assert_eq!(held, slots("cpu=3,gpu=1,mem=4GiB"));
    assert_eq!(
        held.names().map(SlotName::as_str).collect::<Vec<_>>(),
        ["cpu", "gpu", "mem"]
    );
    held.try_sub(&slots("gpu=1,mem=4GiB")).expect("held");
    assert_eq!(held, slots("cpu=3"), "slots brought to zero are gone");
    assert_eq!(held.len(), 1);

    let err = held.try_sub(&slots("cpu=1,mem=1GiB")).unwrap_err();
    assert!(
        matches!(err, SlotError::Underflow { ref slot, .. } if slot == "mem"),
        "{err}"
    );
    assert_eq!(held, slots("cpu=3"), "nothing subtracted");
    let mut full =
        Slots::from_pairs([(SlotName::new("cpu").unwrap(), Quantity(u64::MAX))]).expect("one slot");
    let err = full.try_add(&slots("cpu=1,gpu=1")).unwrap_err();
    assert!(
        matches!(err, SlotError::Overflow { ref slot } if slot == "cpu"),
        "{err}"
    );
    assert_eq!(full.len(), 1, "nothing added");
    assert_eq!(held.checked_add(&slots("cpu=1")), Ok(slots("cpu=4")));
}

#[test]
fn parses_people_forms() {
    assert_eq!(q("cpu", "2"), Ok(2000));
    assert_eq!(q("cpu", "500m"), Ok(500));
    assert_eq!(q("gpu", "0.5"), Ok(500));
    assert_eq!(q("gpu", ".25"), Ok(250));
    assert_eq!(q("mem", "4GiB"), Ok(4 * (1 << 30) * 1000));
    assert_eq!(q("mem", "4Gi"), Ok(4 * (1 << 30) * 1000));
    assert_eq!(q("mem", "16G"), Ok(16_000_000_000 * 1000));
    assert_eq!(q("mem", "1.5KiB"), Ok(1536 * 1000));
}

#[test]
fn bad_amounts_name_what_is_wrong() {
    assert!(matches!(q("cpu", "-1"), Err(SlotError::Negative { slot, .. }) if slot == "cpu"));
    assert!(matches!(q("mem", "4XB"), Err(SlotError::UnknownUnit { unit, .. }) if unit == "XB"));
    assert!(matches!(
        q("cpu", "0.0001"),
        Err(SlotError::TooPrecise { .. })
    ));
    assert!(matches!(
        q("cpu", "99999999999999999999"),
        Err(SlotError::TooLarge { .. })
    ));
    assert!(matches!(
        q("mem", "20000PiB"),
        Err(SlotError::TooLarge { .. })
    ));
    assert!(matches!(
        q("cpu", "1.2.3"),
        Err(SlotError::NotANumber { .. })
    ));
    assert!(matches!(q("cpu", "."), Err(SlotError::NotANumber { .. })));
    assert!(matches!(q("cpu", ""), Err(SlotError::EmptyAmount { .. })));
}

#[test]
fn parses_and_prints_sets() {
    let s: Slots = "cpu=2, mem=4GiB,gpu=0.5".parse().unwrap();
    assert_eq!(s.to_string(), "cpu=2,gpu=0.5,mem=4GiB");
    assert_eq!(s.to_string().parse::<Slots>().unwrap(), s);
    assert_eq!(
        "gpu.a100=1".parse::<Slots>().unwrap().get("gpu.a100"),
        Quantity::from_milli(1000)
    );
    assert_eq!(
        "cpu=0".parse::<Slots>().unwrap(),
        Slots::new(),
        "zero amounts are not stored"
    );
}

#[test]
fn set_keeps_names_in_order_and_drops_zeros() {
    let name = |n: &str| SlotName::new(n).unwrap();
    let mut s = Slots::new();
    s.set(name("mem"), Quantity::from_units(4).unwrap());
    s.set(name("gpu"), Quantity::from_units(1).unwrap());
    s.set(name("cpu"), Quantity::from_units(2).unwrap());
    s.set(name("gpu"), Quantity::from_units(3).unwrap());
    let names: Vec<&str> = s.names().map(SlotName::as_str).collect();
    assert_eq!(names, ["cpu", "gpu", "mem"]);
    assert_eq!(s.get("gpu"), Quantity::from_units(3).unwrap());
    s.set(name("gpu"), Quantity::ZERO);
    s.set(name("disk"), Quantity::ZERO);
    assert_eq!(s, "cpu=2,mem=4".parse().unwrap());
    assert_eq!(s.len(), 2);
    assert_eq!(
        format!("{:?}", "cpu=1".parse::<Slots>().unwrap()),
        r#"Slots({SlotName("cpu"): Quantity(1000)})"#
    );
}

#[test]
fn bad_sets_name_what_is_wrong() {
    assert_eq!(
        "cpu=1,cpu=2".parse::<Slots>(),
        Err(SlotError::Duplicate("cpu".into()))
    );
    assert_eq!(
        "gpu=1,cpu=0,mem=1,cpu=1".parse::<Slots>(),
        Err(SlotError::Duplicate("cpu".into())),
        "a zero amount counts as given"
    );
    assert_eq!("=1".parse::<Slots>(), Err(SlotError::EmptyName));
    assert_eq!(
        "Cpu=1".parse::<Slots>(),
        Err(SlotError::InvalidName("Cpu".into()))
    );
    assert_eq!(
        "cpu".parse::<Slots>(),
        Err(SlotError::MissingEquals("cpu".into()))
    );
}

#[test]
fn arithmetic_is_exact_and_checked() {
    let a: Slots = "cpu=1.5,gpu=0.5".parse().unwrap();
    let b: Slots = "cpu=0.5,mem=1GiB".parse().unwrap();
    let sum = a.checked_add(&b).unwrap();
    assert_eq!(sum.to_string(), "cpu=2,gpu=0.5,mem=1GiB");
    assert_eq!(sum.checked_sub(&b).unwrap(), a);
    let err = a.checked_sub(&b).unwrap_err();
    assert_eq!(err.to_string(), "mem: cannot take 1GiB from 0");
    let big = Slots::from_pairs([(
        SlotName::new("cpu").unwrap(),
        Quantity::from_milli(u64::MAX),
    )])
    .unwrap();
    assert_eq!(
        big.checked_add(&a),
        Err(SlotError::Overflow { slot: "cpu".into() })
    );
    assert!(b.fits_in(&sum));
    assert!(!sum.fits_in(&b));
    assert_eq!(a.max(&b).to_string(), "cpu=1.5,gpu=0.5,mem=1GiB");
}

#[test]
fn keys_compare_and_order_as_their_texts() {
    let texts = ["bob", "", "alice", "al", "alicia", "b", "\u{e9}", "ALICE"];
    for a in texts {
        for b in texts {
            assert_eq!(Key(a).cmp(&Key(b)), a.cmp(b), "{a:?} against {b:?}");
            assert_eq!(Key(a) == Key(b), a == b, "{a:?} against {b:?}");
        }
    }
}

#[test]
fn dominant_share_is_exact() {
    let total: Slots = "cpu=100,gpu=8".parse().unwrap();
    let used: Slots = "cpu=10,gpu=1".parse().unwrap();
    assert_eq!(used.dominant_share(&total), Share::new(1, 8));
    let unmet: Slots = "fpga=1".parse().unwrap();
    assert!(unmet.dominant_share(&total) > Share::new(1000, 1));
}

#[test]
fn json_accepts_strings_and_numbers() {
    let s: Slots = serde_json::from_str(r#"{"cpu": 2, "gpu": 0.5, "mem": "244GiB"}"#).unwrap();
    assert_eq!(s.to_string(), "cpu=2,gpu=0.5,mem=244GiB");
    assert_eq!(
        serde_json::to_string(&s).unwrap(),
        r#"{"cpu":"2","gpu":"0.5","mem":"244GiB"}"#
    );
    let s: Slots = serde_json::from_str(r#""cpu=2""#).unwrap();
    assert_eq!(s.to_string(), "cpu=2");
    let err = serde_json::from_str::<Slots>(r#"{"cpu": -1}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cpu: negative amount"), "{err}");
    let err = serde_json::from_str::<Slots>(r#"{"cpu": 1, "cpu": 2}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("slot \"cpu\" is given twice"), "{err}");
    let err = serde_json::from_str::<Slots>(r#"{"cpu": true}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("an amount"), "{err}");
}
