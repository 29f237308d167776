//! tracer as a library: the loader, decoding, flow table, verdict rules and
//! renderers, so that benches, fuzz targets and tests can drive them.

pub mod btf;
pub mod cli;
pub mod command;
pub mod counted;
pub mod event;
pub mod facts;
pub mod flow;
pub mod frozen;
pub mod funcs;
pub mod hop;
pub mod intern;
pub mod ipvs;
pub mod live;
pub mod loader;
pub mod names;
pub mod netfilter;
pub mod netns;
pub mod output;
pub mod pipeline;
pub mod procstat;
pub mod record;
pub mod replay;
pub mod session;
pub mod target;
pub mod verdict;
pub mod vip;
