//! tracer as a library, in layers; each uses only the layers before it
//! (tracer/tests/layers.rs checks):
//! 1. `node`: facts of the node read on demand (namespaces and their
//!    addresses, netfilter rules and counters, IPVS tables, who owns the
//!    followed address, the helper commands still run);
//! 2. `model`: the target, ring records decoded, names of kernel numbers,
//!    hops, flows, the flow table and packing, counted packets;
//! 3. `kernel`: BTF, the probe registry, loading and attaching the
//!    programs, tc, and the live [`kernel::session::Session`];
//! 4. `verdict`: evidence, rules and hints;
//! 5. `merge`: several nodes' JSON output stitched into one story per
//!    flow (pure: records in, paths out);
//! 6. `output`: everything printed (sinks, summary, diagnostics);
//! 7. `run`: records in, verdicts out: the pure pipeline, recordings, the
//!    live run and its node facts, replay;
//! 8. `cluster`: tracer on a cluster's nodes through kubectl (the
//!    kubectl plugin: resolution, pod specs, the pods' streams);
//! 9. `cli`: arguments and wiring.

pub mod cli;
pub mod cluster;
pub mod kernel;
pub mod merge;
pub mod model;
pub mod node;
pub mod output;
pub mod run;
pub mod verdict;
