//! Blind scenes of the node's own state below the sockets (queueing
//! disciplines, routing loops, tunnels, IPsec policies, addresses).
//! Falls back to [`crate::blind_stack::build`].

use anyhow::Result;

use crate::scenarios::Scenario;

pub fn build(name: &str) -> Option<Result<Scenario>> {
    crate::blind_stack::build(name)
}
