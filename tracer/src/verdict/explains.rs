//! Which cause explains each kernel drop reason, and the node facts it
//! reads: the table `tracer doctor --reasons` prints against the running
//! kernel's `enum skb_drop_reason`. Each cause module declares its own
//! rows (`EXPLAINS`, beside its signals); the rules still in rules.rs
//! declare theirs there ([`super::rules::EXPLAINS`]).

use std::collections::HashSet;

use crate::model::drop_reason::DropReason;

/// One cause's row: the reasons it explains, where, and from which facts.
#[derive(Debug)]
pub struct Explains {
    /// The kernel's names (`SKB_DROP_REASON_` left off).
    pub reasons: &'static [DropReason],
    /// The cause, as the verdict names it, and the module it lives in.
    pub cause: &'static str,
    /// Where the reason must be given for the cause to be asked (a
    /// function, a device kind), empty for anywhere.
    pub at: &'static str,
    /// The node facts it reads to claim the cause.
    pub facts: &'static str,
}

/// Every cause's rows.
pub fn all() -> impl Iterator<Item = &'static Explains> {
    [
        super::rules::EXPLAINS,
        super::bpf_drop::EXPLAINS,
        super::bridge::EXPLAINS,
        super::tunnel::EXPLAINS,
        super::no_protocol::EXPLAINS,
        super::sysctl::EXPLAINS,
        super::veth::EXPLAINS,
        super::ct_state::EXPLAINS,
        super::source_addr::EXPLAINS,
        super::checksum::EXPLAINS,
        super::cgroup_skb::EXPLAINS,
        super::routing_loop::EXPLAINS,
        super::qdisc_drop::EXPLAINS,
        super::xfrm_policy::EXPLAINS,
        super::fragments::EXPLAINS,
    ]
    .into_iter()
    .flatten()
}

/// The rows that explain `reason`.
pub fn explaining(reason: &DropReason) -> Vec<&'static Explains> {
    all().filter(|e| e.reasons.contains(reason)).collect()
}

/// Every reason some cause explains.
pub fn explained() -> HashSet<&'static DropReason> {
    all().flat_map(|e| e.reasons.iter()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reason a cause claims to explain is one of the running
    /// kernel's (this machine runs the newest kernel the matrix has), and
    /// every cause says what it reads.
    #[test]
    fn causes_name_only_reasons_the_kernel_has() {
        let Ok(btf) = crate::kernel::btf::Btf::from_sys() else {
            eprintln!("!!!!! SKIPPED: no kernel BTF to check the drop reasons against !!!!!");
            return;
        };
        let names =
            crate::kernel::btf::offsets::enum_names(&btf, "skb_drop_reason", "SKB_DROP_REASON_");
        assert!(names.len() > 60, "{names:?}");
        let known: HashSet<&str> = names.values().map(String::as_str).collect();
        for e in all() {
            assert!(!e.facts.is_empty() && !e.cause.is_empty(), "{e:?}");
            for r in e.reasons {
                assert!(
                    known.contains(r.as_str()),
                    "{r} ({}) is no drop reason of this kernel",
                    e.cause
                );
            }
        }
        assert!(explained().len() >= 15, "{:?}", explained());
    }
}
