//! Corral's tunnel: the one multiplexed connection an agent dials out to the manager, over
//! which every byte between a user and a session travels (a terminal, an app, a forwarded
//! port), so that agents behind NAT or on a batch cluster's private network serve as well as
//! any. The manager never connects to an agent.
//!
//! [`frame`] is the wire form (pure); [`Tunnel`] runs one connection's streams over any
//! transport of binary messages; [`Open`] says what a stream reaches.

pub mod frame;
mod io;
mod mux;
mod open;
mod stream;

pub use frame::{Frame, FrameError, Kind};
pub use io::{bridge, into_io};
pub use mux::{Accepted, Keepalive, Side, Tunnel, KEEPALIVE_ENV};
pub use open::{Exec, Open, Target};
pub use stream::{Closed, Stream, StreamReader, StreamWriter, MAX_CHUNK, WINDOW};
