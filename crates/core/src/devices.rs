//! Devices: accelerators an agent holds one by one (GPUs, MIG instances, any kind a runtime
//! detects), what sessions ask of them, and what they are granted.
//!
//! A device kind is a slot (`gpu`). A request of that slot asks either for whole devices
//! (`gpu=2`: two idle devices, exclusively) or for a fraction of ONE device (`gpu=0.5`, with
//! `gpu.mem=10GiB` of its memory if it says so), never split over two. Constraints pick the
//! devices' class: a model (`gpu.model=A100*`) and a least device memory (`gpu.mem>=40GiB`).
//! The named slots stay sums (`gpu` is the devices' shares added up, `gpu.mem` their memory), so
//! fair shares and totals read them as before; which device holds what is the ledger's
//! ([`crate::ledger`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::slots::{Quantity, SlotError, SlotName, Slots, SCALE};

/// The device kind every agent has, declared or not: `gpu`.
pub const GPU: &str = "gpu";

/// Errors in device lists, device requests and their constraints, naming the part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error(transparent)]
    Slot(#[from] SlotError),
    #[error("{kind}={amount}: ask for whole devices ({kind}=1, {kind}=2, ...) or for a fraction of one device ({kind}=0.5); a request is never split over devices")]
    SplitRequest { kind: String, amount: String },
    #[error("{kind}.mem is the memory of a fraction of one device: ask for a fraction ({kind}=0.5,{kind}.mem=10GiB); whole devices come with all their memory")]
    MemoryWithWhole { kind: String },
    #[error("{key} needs a {kind} request beside it ({kind}=1 or {kind}=0.5)")]
    ConstraintWithoutRequest { key: String, kind: String },
    #[error("{key} is given twice")]
    DuplicateConstraint { key: String },
    #[error("{key}: {text:?} is not a model pattern (letters, digits, spaces and -_.:/()+ with * and ? as wildcards, at most 128 characters)")]
    BadModel { key: String, text: String },
    #[error("{text:?}: expected name=amount, {{kind}}.model=PATTERN or {{kind}}.mem>=AMOUNT")]
    BadTerm { text: String },
    #[error("device {id:?}: {why}")]
    BadDevice { id: String, why: String },
    #[error("device id {0:?} is listed twice")]
    DuplicateDevice(String),
    #[error("the slots say {given}, but the devices add up to {listed}")]
    SetTotals { given: String, listed: String },
}

/// One device of an agent, and what sessions hold of it now.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// Its identifier on its host: the UUID `nvidia-smi` gives (`GPU-…`, `MIG-…`).
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::DeviceId))]
    pub id: String,
    /// The slot it provides.
    #[serde(default = "gpu_kind")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::SlotNameText, example = "gpu"))]
    pub kind: SlotName,
    /// Model name (`NVIDIA A100-SXM4-80GB`, `NVIDIA A100-SXM4-40GB MIG 1g.5gb`); empty when
    /// unknown.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::ModelName))]
    pub model: String,
    /// Its memory (`80GiB`); 0 when unknown.
    #[serde(default, with = "bytes")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Amount, example = "80GiB"))]
    pub memory: Quantity,
    /// How much of one device it is: 1 (the default) for a real device.
    #[serde(default = "one", with = "units")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::DeviceShare, example = "1"))]
    pub share: Quantity,
    /// The share sessions hold on it.
    #[serde(default, with = "units")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Amount, example = "0.5"))]
    pub allocated: Quantity,
    /// The memory sessions hold on it (fractions that asked for memory; a whole device's).
    #[serde(default, with = "bytes")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Amount, example = "10GiB"))]
    pub allocated_memory: Quantity,
}

impl Device {
    /// A whole, idle device.
    pub fn new(id: &str, kind: &str, model: &str, memory: Quantity) -> Result<Self, DeviceError> {
        Ok(Device {
            id: id.to_string(),
            kind: SlotName::new(kind)?,
            model: model.to_string(),
            memory,
            share: one(),
            allocated: Quantity::ZERO,
            allocated_memory: Quantity::ZERO,
        })
    }
}

/// What one session was given of one device.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceGrant {
    /// The device's id on the agent.
    pub id: String,
    #[serde(default = "gpu_kind")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::SlotNameText, example = "gpu"))]
    pub kind: SlotName,
    /// The share of the device: 1 for a whole one.
    #[serde(with = "units")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::DeviceShare, example = "0.5"))]
    pub share: Quantity,
    /// Its memory given with it (all of it for a whole device).
    #[serde(default, with = "bytes")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Amount, example = "10GiB"))]
    pub memory: Quantity,
}

/// Which devices of a kind a request accepts: a model pattern and a least memory.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConstraint {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::SlotNameText, example = "gpu"))]
    pub kind: SlotName,
    /// A model name pattern, `*` any characters and `?` one, compared ignoring case; matched
    /// against the whole name or, when the name starts with a vendor, the name without it
    /// (`A100*` matches `NVIDIA A100-SXM4-80GB`).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::ModelPattern>))]
    pub model: Option<String>,
    /// Devices with less memory than this are not accepted.
    #[serde(default, with = "opt_bytes")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Amount>, example = "40GiB"))]
    pub min_memory: Option<Quantity>,
}

impl DeviceConstraint {
    /// Whether a device of this model and memory is accepted.
    pub fn accepts(&self, model: &str, memory: Quantity) -> bool {
        self.min_memory.is_none_or(|m| memory >= m)
            && self
                .model
                .as_deref()
                .is_none_or(|pattern| model_matches(pattern, model))
    }
}

/// Devices a template brings: `count` of one model.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSet {
    #[serde(default = "gpu_kind")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::SlotNameText, example = "gpu"))]
    pub kind: SlotName,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::ModelName))]
    pub model: String,
    #[serde(default, with = "bytes")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Amount, example = "80GiB"))]
    pub memory: Quantity,
    #[cfg_attr(feature = "openapi", schema(maximum = 1024))]
    pub count: u32,
}

/// How a request's amount of a device kind is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceAsk {
    /// This many idle devices, exclusively.
    Whole(u32),
    /// A share (in thousandths, below one device) of ONE device, with this much of its memory.
    Fraction { share: u64, memory: u64 },
}

/// What `request` asks of device kind `kind`, checked: `None` when it asks nothing of it.
pub fn ask(request: &Slots, kind: &SlotName) -> Result<Option<DeviceAsk>, DeviceError> {
    let amount = request.get(kind.as_str()).milli();
    let memory = request.get(&memory_slot(kind)).milli();
    ask_amounts(kind, amount, memory)
}

/// [`ask`] for a request giving `amount` of `kind` and `memory` of `{kind}.mem` (thousandths).
pub fn ask_amounts(
    kind: &SlotName,
    amount: u64,
    memory: u64,
) -> Result<Option<DeviceAsk>, DeviceError> {
    if amount == 0 {
        if memory > 0 {
            return Err(DeviceError::ConstraintWithoutRequest {
                key: memory_slot(kind),
                kind: kind.to_string(),
            });
        }
        return Ok(None);
    }
    if amount < SCALE {
        return Ok(Some(DeviceAsk::Fraction {
            share: amount,
            memory,
        }));
    }
    if !amount.is_multiple_of(SCALE) {
        return Err(DeviceError::SplitRequest {
            kind: kind.to_string(),
            amount: Quantity::from_milli(amount).to_string(),
        });
    }
    if memory > 0 {
        return Err(DeviceError::MemoryWithWhole {
            kind: kind.to_string(),
        });
    }
    Ok(Some(DeviceAsk::Whole(
        u32::try_from(amount / SCALE).unwrap_or(u32::MAX),
    )))
}

/// The slot that holds a fraction's device memory: `gpu.mem`.
pub fn memory_slot(kind: &SlotName) -> String {
    format!("{kind}.mem")
}

/// Checks a request's device part: every device kind's amount (whole or a fraction of one),
/// and constraints only on kinds it asks for, each key once.
pub fn check_request(
    request: &Slots,
    constraints: &[DeviceConstraint],
    kinds: &[SlotName],
) -> Result<(), DeviceError> {
    for kind in kinds {
        ask(request, kind)?;
    }
    let mut seen = std::collections::BTreeSet::new();
    for c in constraints {
        if request.get(c.kind.as_str()).is_zero() {
            return Err(DeviceError::ConstraintWithoutRequest {
                key: format!(
                    "{}.{}",
                    c.kind,
                    if c.model.is_some() { "model" } else { "mem>=" }
                ),
                kind: c.kind.to_string(),
            });
        }
        if let Some(model) = &c.model {
            check_model(&format!("{}.model", c.kind), model)?;
        }
        if !seen.insert(&c.kind) {
            return Err(DeviceError::DuplicateConstraint {
                key: format!("{} constraints", c.kind),
            });
        }
    }
    Ok(())
}

fn check_model(key: &str, pattern: &str) -> Result<(), DeviceError> {
    let ok = !pattern.trim().is_empty()
        && pattern.len() <= 128
        && pattern
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " -_.:/()+*?".contains(c));
    if ok {
        Ok(())
    } else {
        Err(DeviceError::BadModel {
            key: key.to_string(),
            text: pattern.to_string(),
        })
    }
}

/// Parses people's form of a request with its device constraints:
/// `cpu=2,gpu=0.5,gpu.mem=10GiB,gpu.model=A100*,gpu.mem>=40GiB`.
pub fn parse_request(text: &str) -> Result<(Slots, Vec<DeviceConstraint>), DeviceError> {
    let mut amounts: Vec<&str> = Vec::new();
    let mut constraints: Vec<DeviceConstraint> = Vec::new();
    let mut entry = |kind: &str| -> Result<usize, DeviceError> {
        let kind = SlotName::new(kind)?;
        Ok(match constraints.iter().position(|c| c.kind == kind) {
            Some(i) => i,
            None => {
                constraints.push(DeviceConstraint {
                    kind,
                    model: None,
                    min_memory: None,
                });
                constraints.len() - 1
            }
        })
    };
    let mut parts: Vec<(usize, bool, String)> = Vec::new();
    for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if let Some((key, value)) = term.split_once(">=") {
            let kind = key
                .trim()
                .strip_suffix(".mem")
                .ok_or_else(|| DeviceError::BadTerm { text: term.into() })?;
            let memory = Quantity::parse(key.trim(), value.trim())?;
            let i = entry(kind)?;
            parts.push((i, false, memory.milli().to_string()));
        } else if let Some((key, value)) = term.split_once('=') {
            match key.trim().strip_suffix(".model") {
                Some(kind) => {
                    check_model(key.trim(), value.trim())?;
                    let i = entry(kind)?;
                    parts.push((i, true, value.trim().to_string()));
                }
                None => amounts.push(term),
            }
        } else {
            return Err(DeviceError::BadTerm { text: term.into() });
        }
    }
    for (i, is_model, value) in parts {
        let c = &mut constraints[i];
        let key = format!("{}.{}", c.kind, if is_model { "model" } else { "mem>=" });
        let duplicate = if is_model {
            c.model.replace(value).is_some()
        } else {
            let milli = value.parse().unwrap_or_default();
            c.min_memory.replace(Quantity::from_milli(milli)).is_some()
        };
        if duplicate {
            return Err(DeviceError::DuplicateConstraint { key });
        }
    }
    let slots: Slots = amounts.join(",").parse()?;
    Ok((slots, constraints))
}

/// A request as people write it, slots and device constraints together:
/// `cpu=2,gpu=0.5,gpu.model=A100*` ([`parse_request`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub slots: Slots,
    pub constraints: Vec<DeviceConstraint>,
}

impl std::str::FromStr for Request {
    type Err = DeviceError;

    fn from_str(text: &str) -> Result<Self, DeviceError> {
        let (slots, constraints) = parse_request(text)?;
        Ok(Request { slots, constraints })
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.slots)?;
        if !self.constraints.is_empty() {
            write!(f, ",{}", ConstraintsText(&self.constraints))?;
        }
        Ok(())
    }
}

/// People's form of a request's constraints: `gpu.model=A100*,gpu.mem>=40GiB`.
pub struct ConstraintsText<'a>(pub &'a [DeviceConstraint]);

impl fmt::Display for ConstraintsText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            let s = if first { "" } else { "," };
            first = false;
            f.write_str(s)
        };
        for c in self.0 {
            if let Some(m) = &c.model {
                sep(f)?;
                write!(f, "{}.model={m}", c.kind)?;
            }
            if let Some(m) = c.min_memory {
                sep(f)?;
                write!(f, "{}.mem>={}", c.kind, bytes_text(m))?;
            }
        }
        Ok(())
    }
}

/// Checks a template's device sets: model names of at most 128 characters without control
/// characters, at most 1,024 devices a set.
pub fn check_device_sets(sets: &[DeviceSet]) -> Result<(), DeviceError> {
    for (i, set) in sets.iter().enumerate() {
        if set.model.len() > 128 || set.model.chars().any(char::is_control) || set.count > 1024 {
            return Err(DeviceError::BadDevice {
                id: format!("devices[{i}]"),
                why: "a model name is at most 128 characters, no control character; at most \
                    1024 devices a set"
                    .into(),
            });
        }
    }
    Ok(())
}

/// Checks a template's device sets and writes what they add up to into its slots, for each
/// kind they name (`gpu=8,gpu.mem=640GiB` for eight 80GiB devices): every reader of a template's
/// slots (the pass, the planner, the providers that hand them to a new agent) then sees what
/// its devices bring. A total the slots already give must agree; memory only where every set of
/// the kind says its memory.
pub fn complete_template_slots(slots: &mut Slots, sets: &[DeviceSet]) -> Result<(), DeviceError> {
    check_device_sets(sets)?;
    let mut kinds: Vec<&SlotName> = sets.iter().map(|s| &s.kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let too_large = |kind: &SlotName| DeviceError::BadDevice {
        id: format!("{kind} sets"),
        why: "their memory adds up beyond what an amount can hold".into(),
    };
    for kind in kinds {
        let of_kind = || sets.iter().filter(move |s| &s.kind == kind);
        let count: u64 = of_kind().map(|s| u64::from(s.count)).sum();
        check_or_fill(slots, kind.clone(), Quantity::from_milli(count * SCALE))?;
        if of_kind().all(|s| !s.memory.is_zero()) {
            let memory = of_kind()
                .try_fold(0u64, |sum, s| {
                    s.memory
                        .milli()
                        .checked_mul(u64::from(s.count))
                        .and_then(|m| sum.checked_add(m))
                })
                .ok_or_else(|| too_large(kind))?;
            check_or_fill(
                slots,
                SlotName::new(&memory_slot(kind))?,
                Quantity::from_milli(memory),
            )?;
        }
    }
    Ok(())
}

/// Sets `name` to `total` where `slots` do not give it, or checks that they agree.
fn check_or_fill(slots: &mut Slots, name: SlotName, total: Quantity) -> Result<(), DeviceError> {
    let given = slots.get(name.as_str());
    if given.is_zero() {
        slots.set(name, total);
        return Ok(());
    }
    if given == total {
        return Ok(());
    }
    let one = |q: Quantity| format!("{name}={}", q.display_for(&name));
    Err(DeviceError::SetTotals {
        given: one(given),
        listed: one(total),
    })
}

/// Whether `model` matches `pattern` (`*`, `?`; ASCII case ignored), as a whole or without its
/// first word (the vendor: `NVIDIA A100-SXM4-80GB` matches `A100*`).
pub fn model_matches(pattern: &str, model: &str) -> bool {
    let p = pattern.as_bytes();
    glob(p, model.as_bytes())
        || model
            .split_once(' ')
            .is_some_and(|(_, rest)| glob(p, rest.as_bytes()))
}

/// `*` and `?` wildcard match, ASCII case-insensitive, linear backtracking on the last `*`.
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi].eq_ignore_ascii_case(&s[si])) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Checks an agent's device list: ids unique and non-empty, model names without control
/// characters, shares within one device (what is allocated is the manager's to count).
pub fn check_devices(devices: &[Device]) -> Result<(), DeviceError> {
    if devices.len() > crate::ledger::MAX_DEVICES {
        return Err(DeviceError::BadDevice {
            id: format!("devices[{}]", crate::ledger::MAX_DEVICES),
            why: format!(
                "an agent lists at most {} devices",
                crate::ledger::MAX_DEVICES
            ),
        });
    }
    let mut ids = std::collections::BTreeSet::new();
    for d in devices {
        let bad = |why: &str| DeviceError::BadDevice {
            id: d.id.clone(),
            why: why.to_string(),
        };
        if d.id.is_empty() || d.id.len() > 128 || d.id.chars().any(|c| c.is_control() || c == ',') {
            return Err(bad(
                "an id is 1 to 128 characters, no comma or control character",
            ));
        }
        if d.model.len() > 128 || d.model.chars().any(char::is_control) {
            return Err(bad(
                "a model name is at most 128 characters, no control character",
            ));
        }
        if d.share.is_zero() || d.share.milli() > SCALE {
            return Err(bad("its share is above 0 and at most 1"));
        }
        if !ids.insert(d.id.as_str()) {
            return Err(DeviceError::DuplicateDevice(d.id.clone()));
        }
    }
    Ok(())
}

fn gpu_kind() -> SlotName {
    SlotName::new(GPU).expect("gpu is a slot name")
}

fn one() -> Quantity {
    Quantity::from_milli(SCALE)
}

/// `80GiB` when exact in binary units, else the number of bytes.
pub fn bytes_text(q: Quantity) -> String {
    q.display_for(&SlotName::new("mem").expect("mem is a slot name"))
}

/// Amounts of units (`0.5`) as people write them.
mod units {
    use super::*;

    pub fn serialize<S: serde::Serializer>(q: &Quantity, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&q.to_string())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Quantity, D::Error> {
        let text = crate::slots::AmountText::deserialize(d)?.0;
        Quantity::parse("share", &text).map_err(serde::de::Error::custom)
    }
}

/// Amounts of bytes (`80GiB`, or a number of bytes) as people write them.
mod bytes {
    use super::*;

    pub fn serialize<S: serde::Serializer>(q: &Quantity, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&bytes_text(*q))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Quantity, D::Error> {
        let text = crate::slots::AmountText::deserialize(d)?.0;
        Quantity::parse("memory", &text).map_err(serde::de::Error::custom)
    }
}

mod opt_bytes {
    use super::*;

    pub fn serialize<S: serde::Serializer>(q: &Option<Quantity>, s: S) -> Result<S::Ok, S::Error> {
        match q {
            Some(q) => s.serialize_some(&bytes_text(*q)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Quantity>, D::Error> {
        let text = Option::<crate::slots::AmountText>::deserialize(d)?;
        text.map(|t| Quantity::parse("min_memory", &t.0).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod template_totals {
    use super::*;

    fn a100s(count: u32, memory: &str) -> DeviceSet {
        DeviceSet {
            kind: gpu_kind(),
            model: "NVIDIA A100-SXM4-80GB".into(),
            memory: Quantity::parse("gpu.mem", memory).unwrap(),
            count,
        }
    }

    fn completed(slots: &str, sets: &[DeviceSet]) -> Result<String, String> {
        let mut slots: Slots = slots.parse().unwrap();
        complete_template_slots(&mut slots, sets)
            .map(|()| slots.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_slots_get_what_the_sets_add_up_to() {
        let sets = [a100s(8, "80GiB"), a100s(2, "40GiB")];
        assert_eq!(
            completed("cpu=96", &sets).unwrap(),
            "cpu=96,gpu=10,gpu.mem=720GiB"
        );
        // Already said, and agreeing: kept.
        assert_eq!(
            completed("cpu=96,gpu=10,gpu.mem=720GiB", &sets).unwrap(),
            "cpu=96,gpu=10,gpu.mem=720GiB"
        );
    }

    #[test]
    fn slots_that_disagree_are_refused_naming_both_totals() {
        assert_eq!(
            completed("gpu=8,gpu.mem=80GiB", &[a100s(8, "80GiB")]).unwrap_err(),
            "the slots say gpu.mem=80GiB, but the devices add up to gpu.mem=640GiB"
        );
    }

    #[test]
    fn memory_is_left_alone_where_a_set_does_not_say_it() {
        let sets = [a100s(1, "80GiB"), a100s(1, "0")];
        assert_eq!(
            completed("gpu.mem=100GiB", &sets).unwrap(),
            "gpu=2,gpu.mem=100GiB"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_with_their_constraints() {
        let (slots, constraints) =
            parse_request("cpu=2,gpu=0.5,gpu.mem=10GiB,gpu.model=A100*,gpu.mem>=40GiB").unwrap();
        assert_eq!(slots.to_string(), "cpu=2,gpu=0.5,gpu.mem=10GiB");
        assert_eq!(
            constraints,
            [DeviceConstraint {
                kind: SlotName::new("gpu").unwrap(),
                model: Some("A100*".into()),
                min_memory: Some(Quantity::parse("mem", "40GiB").unwrap()),
            }]
        );
        assert_eq!(
            ConstraintsText(&constraints).to_string(),
            "gpu.model=A100*,gpu.mem>=40GiB"
        );
        let request: Request = "gpu=1,gpu.model=H100*".parse().unwrap();
        assert_eq!(request.to_string(), "gpu=1,gpu.model=H100*");
    }

    #[test]
    fn bad_requests_name_what_is_wrong() {
        let err = |text: &str| parse_request(text).unwrap_err().to_string();
        assert_eq!(
            err("gpu=1,gpu.model=A1;00"),
            "gpu.model: \"A1;00\" is not a model pattern (letters, digits, spaces and -_.:/()+ with * and ? as wildcards, at most 128 characters)"
        );
        assert_eq!(
            err("gpu=1,gpu.model=A,gpu.model=B"),
            "gpu.model is given twice"
        );
        assert_eq!(
            err("gpu=1,gpu.cores>=4"),
            "\"gpu.cores>=4\": expected name=amount, {kind}.model=PATTERN or {kind}.mem>=AMOUNT"
        );
        let gpu = SlotName::new("gpu").unwrap();
        let ask_of = |text: &str| ask(&text.parse().unwrap(), &gpu);
        assert_eq!(ask_of("gpu=2"), Ok(Some(DeviceAsk::Whole(2))));
        assert_eq!(
            ask_of("gpu=0.25"),
            Ok(Some(DeviceAsk::Fraction {
                share: 250,
                memory: 0
            }))
        );
        assert!(matches!(
            ask_of("gpu=2.5"),
            Err(DeviceError::SplitRequest { .. })
        ));
        assert!(matches!(
            ask_of("gpu=1,gpu.mem=1GiB"),
            Err(DeviceError::MemoryWithWhole { .. })
        ));
        assert!(matches!(
            ask_of("gpu.mem=1GiB"),
            Err(DeviceError::ConstraintWithoutRequest { .. })
        ));
        let (slots, constraints) = parse_request("cpu=1,gpu.model=A100").unwrap();
        assert_eq!(
            check_request(&slots, &constraints, &[gpu])
                .unwrap_err()
                .to_string(),
            "gpu.model needs a gpu request beside it (gpu=1 or gpu=0.5)"
        );
    }

    #[test]
    fn model_patterns_match_with_or_without_the_vendor() {
        assert!(model_matches("A100*", "NVIDIA A100-SXM4-80GB"));
        assert!(model_matches("nvidia a100*", "NVIDIA A100-SXM4-80GB"));
        assert!(model_matches("*80GB", "NVIDIA A100-SXM4-80GB"));
        assert!(model_matches("A100-SXM4-??GB", "NVIDIA A100-SXM4-40GB"));
        assert!(!model_matches(
            "A100-SXM4-40GB",
            "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
        ));
        assert!(model_matches(
            "*MIG 1g.5gb",
            "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
        ));
        assert!(!model_matches("H100*", "NVIDIA A100-SXM4-80GB"));
        assert!(!model_matches("A100", ""));
    }

    #[test]
    fn device_lists_are_checked() {
        let mut d = Device::new("GPU-1", GPU, "A100", Quantity::ZERO).unwrap();
        assert_eq!(check_devices(&[d.clone()]), Ok(()));
        assert_eq!(
            check_devices(&[d.clone(), d.clone()]),
            Err(DeviceError::DuplicateDevice("GPU-1".into()))
        );
        d.id = "a,b".into();
        assert!(check_devices(&[d]).is_err());
    }
}
