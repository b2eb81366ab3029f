//! Corral's functional core. No IO, no clock, no unseeded randomness: the manager, the simulator,
//! `corral plan` and the tests all run this exact code.

pub mod dense;
pub mod model;
pub mod planner;
pub mod slots;

pub use model::*;
pub use slots::{Quantity, Share, SlotError, SlotName, Slots};
