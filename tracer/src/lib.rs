//! tracer as a library, in layers (each uses only those above it):
//! - `kernel`: BTF, loading and attaching the programs, the live [`kernel::session::Session`];
//! - `model`: ring records decoded, hops, flows, packing;
//! - `node`: facts of the node (namespaces, netfilter, IPVS, the followed
//!   address's owners, names);
//! - `verdict`: the rules and hints;
//! - `pipeline`, `record`, `live`, `replay`: records in, verdicts out;
//! - `output`: everything printed; `cli`: arguments and wiring.

pub mod cli;
pub mod kernel;
pub mod live;
pub mod model;
pub mod node;
pub mod output;
pub mod pipeline;
pub mod record;
pub mod replay;
pub mod verdict;
