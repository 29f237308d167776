//! tracer as a library: the loader, decoding, flow table, verdict rules and
//! renderers, so that benches, fuzz targets and tests can drive them.

pub mod btf;
pub mod cli;
pub mod command;
pub mod counted;
pub mod event;
pub mod flow;
pub mod frozen;
pub mod funcs;
pub mod hop;
pub mod intern;
pub mod ipvs;
pub mod loader;
pub mod names;
pub mod netfilter;
pub mod netns;
pub mod procstat;
pub mod render;
pub mod target;
pub mod verdict;
pub mod vip;
