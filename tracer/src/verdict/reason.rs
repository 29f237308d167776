//! A verdict's reason: the kernel's drop reason ([`DropReason`]), or what a
//! rule found where the kernel gave none (a delivery, a misroute, a reply
//! nobody translated). Both are written as the kernel and the rules name
//! them (`NETFILTER_DROP`, `local_socket`); rules and hints match on the
//! values.

use std::fmt;

use serde::{Serialize, Serializer};

pub use crate::model::drop_reason::DropReason;

/// What a verdict says happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The kernel's reason for the drop the verdict names.
    Kernel(DropReason),
    /// A rule's finding.
    Found(Found),
}

/// What a rule found, named as the verdict writes it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::EnumIter,
)]
#[strum(serialize_all = "snake_case")]
pub enum Found {
    /// A local socket took the packet.
    LocalSocket,
    /// The destination's answer was seen.
    ReplySeen,
    /// The packet left towards the next hop; its fate is not known here.
    Routed,
    /// Nothing came back, and no drop was seen.
    NoReplySeen,
    /// Another host's address is bound locally, so this node answers.
    LocalRouteShadowsHost,
    /// A packet for a local address was sent out of a device.
    LocalDestinationTransmitted,
    /// SNAT chose the address of another interface.
    NatSourceFromOtherInterface,
    /// The answer has no route back to the client.
    ReplyUnroutable,
    /// An IPVS Service with no destination.
    IpvsNoDestination,
    /// The listener's accept queue was full.
    ListenOverflow,
    /// Answers reached the client untranslated.
    ReplyNotTranslated,
    /// A native (driver) XDP program took the request; nothing came out.
    TakenByNativeXdp,
}

impl Found {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl Reason {
    pub fn as_str(&self) -> &str {
        match self {
            Reason::Kernel(r) => r.as_str(),
            Reason::Found(f) => f.as_str(),
        }
    }

    /// The kernel's drop reason, when it is one.
    pub fn drop_reason(&self) -> Option<&DropReason> {
        match self {
            Reason::Kernel(r) => Some(r),
            Reason::Found(_) => None,
        }
    }
}

impl From<DropReason> for Reason {
    fn from(r: DropReason) -> Self {
        Reason::Kernel(r)
    }
}

impl From<&DropReason> for Reason {
    fn from(r: &DropReason) -> Self {
        Reason::Kernel(r.clone())
    }
}

impl From<Found> for Reason {
    fn from(f: Found) -> Self {
        Reason::Found(f)
    }
}

impl PartialEq<DropReason> for Reason {
    fn eq(&self, o: &DropReason) -> bool {
        matches!(self, Reason::Kernel(r) if r == o)
    }
}

impl PartialEq<Found> for Reason {
    fn eq(&self, o: &Found) -> bool {
        matches!(self, Reason::Found(f) if f == o)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl schemars::JsonSchema for Reason {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Reason".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut s = String::json_schema(g);
        s.insert(
            "description".into(),
            "The kernel's drop reason (SKB_DROP_REASON_ left off), or what a rule found (snake_case)"
                .into(),
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use strum::IntoEnumIterator;

    use super::*;

    /// A finding's name is never a kernel reason's, so a reader of the
    /// JSON tells them apart by case.
    #[test]
    fn findings_are_not_kernel_reasons() {
        for f in Found::iter() {
            let s = f.as_str();
            assert_eq!(s, s.to_lowercase(), "{f:?}");
            assert!(matches!(DropReason::named(s), DropReason::Other(_)), "{s}");
        }
        assert_eq!(
            serde_json::to_string(&Reason::from(DropReason::NetfilterDrop)).unwrap(),
            "\"NETFILTER_DROP\""
        );
        assert_eq!(
            serde_json::to_string(&Reason::from(Found::LocalSocket)).unwrap(),
            "\"local_socket\""
        );
    }
}
