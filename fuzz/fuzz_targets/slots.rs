//! Slot amounts and sets: parsing never panics, and what parses prints to a form that parses
//! back to the same value (text and JSON).
#![no_main]

use corral_core::{Quantity, SlotName, Slots};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(slots) = text.parse::<Slots>() {
        let printed = slots.to_string();
        assert_eq!(
            printed.parse::<Slots>().as_ref(),
            Ok(&slots),
            "{text:?} printed {printed:?}"
        );
        let json = serde_json::to_string(&slots).unwrap();
        let back: Slots = serde_json::from_str(&json).unwrap();
        assert_eq!(back, slots, "{text:?} as JSON {json:?}");
    }
    // One amount, for a byte slot (printed with binary units) and a plain one.
    for name in ["mem", "cpu"] {
        let slot = SlotName::new(name).unwrap();
        if let Ok(q) = Quantity::parse(name, text) {
            let printed = q.display_for(&slot);
            assert_eq!(
                Quantity::parse(name, &printed),
                Ok(q),
                "{text:?} printed {printed:?}"
            );
        }
    }
    // The JSON forms: an object of amounts (numbers or strings) or one string.
    if let Ok(slots) = serde_json::from_slice::<Slots>(data) {
        assert_eq!(slots.to_string().parse::<Slots>().as_ref(), Ok(&slots));
    }
});
