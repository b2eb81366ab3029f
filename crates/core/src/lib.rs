//! Corral's functional core. No IO, no clock, no unseeded randomness: the manager, the simulator,
//! `corral plan` and the tests all run this exact code.

pub mod admission;
pub mod agent_update;
pub mod arrays;
pub mod carry;
pub mod cycle;
pub mod decisions;
pub mod dense;
pub mod devices;
pub mod dimensions;
pub mod disconnect;
pub mod expected;
pub mod governor;
pub mod grants;
pub mod image_update;
pub mod ledger;
pub mod model;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod paths;
pub mod plan;
pub mod planner;
pub mod policy;
pub mod rng;
pub mod schedule;
pub mod slots;
pub mod snapshot;
/// Seeded synthetic workloads: for benchmarks (`corral bench`, which enables the feature) and
/// tests, not the manager.
#[cfg(any(test, feature = "testing"))]
pub mod workload;

pub use agent_update::AgentUpdate;
pub use arrays::{ArrayError, ArrayMember, ArrayRange, MAX_ARRAY_SESSIONS};
pub use carry::Carry;
pub use cycle::{cycle, cycle_carrying};
pub use decisions::*;
pub use devices::{Device, DeviceConstraint, DeviceGrant, DeviceSet};
pub use disconnect::OnDisconnect;
pub use governor::{Governor, LaunchLimit, LaunchSettings};
pub use image_update::ImageAutoUpdate;
pub use model::*;
pub use slots::{Quantity, Share, SlotError, SlotName, Slots};
pub use snapshot::Snapshot;
