//! Records in, verdicts out: the pure [`pipeline::Pipeline`], recordings
//! ([`record`]), the live run on the node ([`live`], with its node facts in
//! [`facts`]) and the replay of a recording ([`replay`]).

pub mod budget;
pub mod facts;
pub mod live;
pub mod pipeline;
pub mod record;
pub mod replay;
pub mod trace_load;
