//! Corral's REST API as data, shared by the manager that serves it and everything that calls
//! it: the request and response bodies per resource, the error body, the agent sync protocol,
//! the names that carry an instance's identity from its provider to its agent, and (with the
//! `client` feature, on by default) the one typed client.

pub mod agent_builds;
pub mod agent_keys;
pub mod agents;
pub mod apps;
pub mod arrays;
pub mod batch;
pub mod error;
pub mod events;
pub mod groups;
pub mod history;
pub mod identity;
pub mod images;
pub mod instances;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod plan;
pub mod protocol;
pub mod provider;
pub mod sessions;
pub mod tokens;

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "client")]
pub mod tls;
#[cfg(feature = "client")]
pub mod websocket;

#[cfg(feature = "client")]
pub use client::{Client, Reply};
#[cfg(feature = "client")]
pub use error::{ClientError, Transport};
pub use error::{ErrorBody, ErrorDetail};
pub use provider::{ProviderConfig, REDACTED};
