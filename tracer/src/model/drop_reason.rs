//! The kernel's drop reasons as a type: `enum skb_drop_reason` of the
//! newest kernel the matrix runs (6.18), `SKB_DROP_REASON_` left off, and
//! [`DropReason::Other`] for a name that kernel does not have (an older
//! kernel's, or a newer one's). The numbers differ between kernels, so a
//! hop keeps the kernel's number beside it and the name is resolved from
//! the running kernel's BTF (model/names.rs). Causes match on the
//! variants; the name is written only where a reason is rendered.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::intern::Name;

/// One drop reason. The variants are named as the kernel names them
/// (`PKT_TOO_BIG` is [`DropReason::PktTooBig`]); their order is 6.18's.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    Hash,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum DropReason {
    SkbNotDroppedYet,
    SkbConsumed,
    #[default]
    NotSpecified,
    NoSocket,
    SocketClose,
    SocketFilter,
    SocketRcvbuff,
    UnixDisconnect,
    UnixSkipOob,
    PktTooSmall,
    TcpCsum,
    UdpCsum,
    NetfilterDrop,
    Otherhost,
    IpCsum,
    IpInhdr,
    IpRpfilter,
    UnicastInL2Multicast,
    XfrmPolicy,
    IpNoproto,
    ProtoMem,
    TcpAuthHdr,
    TcpMd5notfound,
    TcpMd5unexpected,
    TcpMd5failure,
    TcpAonotfound,
    TcpAounexpected,
    TcpAokeynotfound,
    TcpAofailure,
    SocketBacklog,
    TcpFlags,
    TcpAbortOnData,
    TcpZerowindow,
    TcpOldData,
    TcpOverwindow,
    TcpOfomerge,
    TcpRfc7323Paws,
    TcpRfc7323PawsAck,
    TcpRfc7323TwPaws,
    TcpRfc7323Tsecr,
    TcpListenOverflow,
    TcpOldSequence,
    TcpInvalidSequence,
    TcpInvalidEndSequence,
    TcpInvalidAckSequence,
    TcpReset,
    TcpInvalidSyn,
    TcpClose,
    TcpFastopen,
    TcpOldAck,
    TcpTooOldAck,
    TcpAckUnsentData,
    TcpOfoQueuePrune,
    TcpOfoDrop,
    IpOutnoroutes,
    BpfCgroupEgress,
    Ipv6disabled,
    NeighCreatefail,
    NeighFailed,
    NeighQueuefull,
    NeighDead,
    NeighHhFillfail,
    TcEgress,
    SecurityHook,
    QdiscDrop,
    QdiscOverlimit,
    QdiscCongested,
    CakeFlood,
    FqBandLimit,
    FqHorizonLimit,
    FqFlowLimit,
    CpuBacklog,
    Xdp,
    TcIngress,
    UnhandledProto,
    SkbCsum,
    SkbGsoSeg,
    SkbUcopyFault,
    DevHdr,
    DevReady,
    FullRing,
    Nomem,
    HdrTrunc,
    TapFilter,
    TapTxfilter,
    IcmpCsum,
    InvalidProto,
    IpInaddrerrors,
    IpInnoroutes,
    IpLocalSource,
    IpInvalidSource,
    IpLocalnet,
    IpInvalidDest,
    PktTooBig,
    DupFrag,
    FragReasmTimeout,
    FragTooFar,
    TcpMinttl,
    Ipv6BadExthdr,
    Ipv6NdiscFrag,
    Ipv6NdiscHopLimit,
    Ipv6NdiscBadCode,
    Ipv6NdiscBadOptions,
    Ipv6NdiscNsOtherhost,
    QueuePurge,
    TcCookieError,
    PacketSockError,
    TcChainNotfound,
    TcReclassifyLoop,
    VxlanInvalidHdr,
    VxlanVniNotFound,
    MacInvalidSource,
    VxlanEntryExists,
    NoTxTarget,
    IpTunnelEcn,
    TunnelTxinfo,
    LocalMac,
    ArpPvlanDisable,
    MacIeeeMacControl,
    BridgeIngressStpState,
    CanRxInvalidFrame,
    CanfdRxInvalidFrame,
    CanxlRxInvalidFrame,
    Pfmemalloc,
    Dualpi2StepDrop,
    PspInput,
    PspOutput,
    RecursionLimit,
    /// A name 6.18 does not have.
    #[strum(default)]
    Other(Name),
}

impl DropReason {
    /// The kernel's name, `SKB_DROP_REASON_` left off.
    pub fn as_str(&self) -> &str {
        match self {
            DropReason::Other(n) => n,
            known => known.into(),
        }
    }

    /// Every reason 6.18 has, in its order.
    pub fn known() -> impl Iterator<Item = DropReason> {
        <DropReason as strum::IntoEnumIterator>::iter()
            .filter(|r| !matches!(r, DropReason::Other(_)))
    }

    /// The reason named `name` (`Other` when 6.18 has no such reason).
    pub fn named(name: &str) -> DropReason {
        DropReason::from(name)
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for DropReason {
    fn eq(&self, o: &str) -> bool {
        self.as_str() == o
    }
}

impl Serialize for DropReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for DropReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(DropReason::named(&s))
    }
}

impl schemars::JsonSchema for DropReason {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DropReason".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut s = String::json_schema(g);
        s.insert(
            "description".into(),
            "The kernel's drop reason, SKB_DROP_REASON_ left off (enum skb_drop_reason)".into(),
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_kept() {
        for r in DropReason::known() {
            assert_eq!(DropReason::named(r.as_str()), r, "{r:?}");
        }
        assert_eq!(DropReason::named("PKT_TOO_BIG"), DropReason::PktTooBig);
        assert_eq!(DropReason::named("IPV6DISABLED"), DropReason::Ipv6disabled);
        let old = DropReason::named("SOMETHING_OLD");
        assert_eq!(old.as_str(), "SOMETHING_OLD");
        assert!(matches!(old, DropReason::Other(_)));
        let j = serde_json::to_string(&DropReason::TcpRfc7323Paws).unwrap();
        assert_eq!(j, "\"TCP_RFC7323_PAWS\"");
        assert_eq!(
            serde_json::from_str::<DropReason>(&j).unwrap(),
            DropReason::TcpRfc7323Paws
        );
    }

    /// Every variant is a reason of the running kernel when it is the
    /// kernel the variants were written from (6.18), and every reason of
    /// that kernel is a variant.
    #[test]
    fn variants_are_the_running_kernels_reasons() {
        let Ok(btf) = crate::kernel::btf::Btf::from_sys() else {
            eprintln!("!!!!! SKIPPED: no kernel BTF to check the drop reasons against !!!!!");
            return;
        };
        let names =
            crate::kernel::btf::offsets::enum_names(&btf, "skb_drop_reason", "SKB_DROP_REASON_");
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        if !release.starts_with("6.18.") {
            eprintln!("!!!!! SKIPPED: the variants are 6.18's; this kernel is {release} !!!!!");
            return;
        }
        let kernel: std::collections::HashSet<&str> = names.values().map(String::as_str).collect();
        for r in DropReason::known() {
            assert!(kernel.contains(r.as_str()), "{r} is not a reason of 6.18");
        }
        // Not reasons: the subsystem bits and the count.
        for n in kernel
            .into_iter()
            .filter(|n| !matches!(*n, "SUBSYS_MASK" | "MAX"))
        {
            assert!(
                !matches!(DropReason::named(n), DropReason::Other(_)),
                "{n} has no variant"
            );
        }
    }
}
