//! Slots as JSON: written as an object of people's forms, read from an object of strings with
//! units or plain numbers, or from one string in the `cpu=2,mem=4GiB` form; `AmountText`, an
//! amount as written (also read by `devices`).

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Quantity, SlotName, Slots};

/// Serialised as an object of people's forms: `{"cpu": "2", "mem": "4GiB"}`.
impl Serialize for Slots {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, q) in self.iter() {
            map.serialize_entry(name.as_str(), &q.display_for(name))?;
        }
        map.end()
    }
}

/// Accepts an object whose values are strings with units or plain non-negative numbers, or one
/// string in the `cpu=2,mem=4GiB` form.
impl<'de> Deserialize<'de> for Slots {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SlotsVisitor)
    }
}

struct SlotsVisitor;

impl<'de> Visitor<'de> for SlotsVisitor {
    type Value = Slots;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"resource slots as an object such as {"cpu": 2, "mem": "4GiB"} or a string such as "cpu=2,mem=4GiB""#)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Slots, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Slots, A::Error> {
        let mut pairs = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let name = SlotName::new(&key).map_err(de::Error::custom)?;
            let text = map.next_value::<AmountText>()?.0;
            let q = Quantity::parse(&key, &text).map_err(de::Error::custom)?;
            pairs.push((name, q));
        }
        Slots::from_pairs(pairs).map_err(de::Error::custom)
    }
}

/// An amount as written: a string, or a JSON number kept as its decimal text.
pub(crate) struct AmountText(pub(crate) String);

impl<'de> Deserialize<'de> for AmountText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = AmountText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an amount: a non-negative number or a string such as \"4GiB\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<AmountText, E> {
                Ok(AmountText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<AmountText, E> {
                Ok(AmountText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<AmountText, E> {
                Ok(AmountText(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<AmountText, E> {
                if !v.is_finite() {
                    return Err(E::custom("amount is not a finite number"));
                }
                // `{}` prints the shortest text that reads back as the same f64: 0.1 stays "0.1".
                Ok(AmountText(format!("{v}")))
            }
        }
        d.deserialize_any(V)
    }
}
