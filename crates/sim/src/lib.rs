//! What-if simulation: replay a recorded workload against a group's configuration to see what
//! a policy or a template change would have done, before it runs on real machines.
//!
//! For now this crate holds the workload-trace readers only (`trace`): the Standard Workload
//! Format of the Parallel Workloads Archive and a plain CSV, both read into [`Trace`], jobs with
//! their requests as [`corral_core::Slots`].

pub mod trace;

pub use trace::{
    parse_csv, parse_swf, read, Format, Malformed, Skipped, SwfHeader, Trace, TraceError, TraceJob,
};
