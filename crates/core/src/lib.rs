//! Corral's functional core. No IO, no clock, no unseeded randomness: the manager, the simulator,
//! `corral plan` and the tests all run this exact code.

pub mod admission;
pub mod cycle;
pub mod decisions;
pub mod dense;
pub mod governor;
pub mod model;
pub mod plan;
pub mod planner;
pub mod policy;
pub mod protocol;
pub mod schedule;
pub mod slots;
pub mod snapshot;
pub mod workload;

pub use cycle::cycle;
pub use decisions::*;
pub use governor::{Governor, LaunchLimit, LaunchSettings};
pub use model::*;
pub use slots::{Quantity, Share, SlotError, SlotName, Slots};
pub use snapshot::Snapshot;
