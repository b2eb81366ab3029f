//! The `corral` command's end-to-end tests, one module per concern, in one test binary: linked
//! once instead of once per file, and run side by side (files used to run one after another,
//! each file's tests two at a time on a 2-core machine, while they mostly wait on the managers,
//! agents and batch jobs they start).

#[path = "../common/mod.rs"]
mod common;

mod agent;
mod agent_update;
mod apps;
mod arrays_api;
mod aws;
mod batch;
mod batch_limits;
mod batch_sessions;
mod client;
mod completions;
mod crash;
mod dashboard;
mod database_restart;
mod deploy;
mod disconnect;
mod external_agents;
mod gpus;
mod ha;
mod image_update;
mod interactive;
mod lifecycle;
mod listings;
mod pilots;
mod plan;
mod prometheus;
mod promises;
mod scaling;
mod server_config;
mod session_arrays;
mod sigpipe;
mod simulate;
mod submit;
mod tls;
