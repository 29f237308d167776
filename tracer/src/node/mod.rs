//! Facts of the node, read on demand: namespaces and their addresses,
//! netfilter rules and counters, IPVS tables, qdiscs, IPsec policies and
//! states, sockets (from /proc/net and by sock_diag), who owns the
//! followed address, the pods that own namespaces, names of kernel
//! numbers, and the helper commands still run.

pub mod bpf_progs;
pub mod command;
pub mod conntrack;
pub mod devmap;
pub mod hostroot;
pub mod ipvs;
pub mod link;
pub mod netfilter;
pub mod netlink;
pub mod netns;
pub mod nftables;
pub mod nftrace;
pub mod nud;
pub mod pods;
pub mod procstat;
pub mod qdisc;
pub mod route;
pub mod services;
pub mod sock_diag;
pub mod sockets;
pub mod tc;
pub mod unseen;
pub mod vip;
pub mod xfrm;
