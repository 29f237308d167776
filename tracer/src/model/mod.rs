//! The model: ring records decoded into events, hops with their facts,
//! flows and the flow table, packing of quiet flows, counted packets.

pub mod capture;
pub mod counted;
pub mod dns;
pub mod dns_flow;
pub mod drop_reason;
pub mod event;
pub mod flow;
pub mod frozen;
pub mod funcs;
pub mod hop;
pub mod icmp_error;
pub mod inferred;
pub mod intern;
pub mod names;
pub mod table;
pub mod target;
