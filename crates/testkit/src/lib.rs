//! What Corral's tests share, one concept per module: waiting for a condition
//! ([`eventually`]), a real container [`Registry`], a load balancer's stand-in before several
//! managers ([`Front`]), a PostgreSQL server a test stops and starts ([`Postgres`]), a network namespace a test cuts off ([`Netns`]), scripts written so that running them never finds them busy ([`write_executable`]), skipping a test whose service is missing ([`require`], which fails
//! instead under `CI=true`; [`cgroup2_parent`] is such a service), and leaving nothing running ([`KillLeftovers`],
//! [`RemoveContainers`]).
//!
//! A dev-dependency only: no shipped crate links it, except through a `testing` feature.

mod cgroups;
mod containers;
mod eventually;
mod executables;
mod front;
mod netns;
mod postgres;
mod processes;
mod registry;
mod skip;

pub use cgroups::cgroup2_parent;
pub use containers::RemoveContainers;
pub use eventually::{eventually, eventually_async, Ready};
pub use executables::write_executable;
pub use front::Front;
pub use netns::Netns;
pub use postgres::Postgres;
pub use processes::KillLeftovers;
pub use registry::Registry;
pub use skip::{
    postgres_admin_url, require, require_busybox, require_ok, shared_data, skip, BUSYBOX,
    POSTGRES_ENV, SHARED_DATA_ENV,
};
