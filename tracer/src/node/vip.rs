//! Who owns the followed address: which namespaces hold it on which device,
//! how often that changed while tracing, and which link-layer addresses
//! answered for it. Two controllers fighting over a LoadBalancer IP
//! (incident 1) show up as owner changes and several MACs.

use std::{collections::BTreeSet, net::IpAddr, path::PathBuf};

use serde::{Deserialize, Serialize};

use crate::node::netns::addresses_in;

/// Whether an owner change added or removed the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OwnerEvent {
    Added,
    Removed,
}

impl std::fmt::Display for OwnerEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OwnerEvent::Added => "added",
            OwnerEvent::Removed => "removed",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OwnerChange {
    /// Milliseconds since tracing started.
    pub t_ms: u64,
    pub netns: String,
    pub dev: String,
    pub addr: IpAddr,
    /// `added` or `removed`.
    pub event: OwnerEvent,
}

/// (namespace label, device, address)
pub type Owner = (String, String, IpAddr);

#[derive(Debug, Default)]
pub struct VipWatch {
    watched: Vec<(String, PathBuf)>,
    owners: BTreeSet<Owner>,
    pub changes: Vec<OwnerChange>,
    /// Link-layer addresses that answered for the target (neighbour updates).
    pub macs: BTreeSet<(IpAddr, String)>,
}

impl VipWatch {
    pub fn new(watched: Vec<(String, PathBuf)>) -> VipWatch {
        VipWatch {
            watched,
            ..Default::default()
        }
    }

    fn current(&self, followed: &dyn Fn(IpAddr) -> bool) -> BTreeSet<Owner> {
        let mut now = BTreeSet::new();
        for (label, path) in &self.watched {
            for a in addresses_in(path).unwrap_or_default() {
                if followed(a.addr) {
                    now.insert((label.clone(), a.dev, a.addr));
                }
            }
        }
        now
    }

    /// First look: who owns it when tracing starts (not a change).
    pub fn start(&mut self, followed: &dyn Fn(IpAddr) -> bool) {
        self.owners = self.current(followed);
    }

    /// Poll again and record what was added or removed.
    pub fn poll(&mut self, followed: &dyn Fn(IpAddr) -> bool, t_ms: u64) {
        let now = self.current(followed);
        self.changes.extend(diff(&self.owners, &now, t_ms));
        self.owners = now;
    }

    /// What a run saw, for its replay: owner changes and answering MACs
    /// (nothing is watched).
    pub fn replayed(changes: Vec<OwnerChange>, macs: BTreeSet<(IpAddr, String)>) -> VipWatch {
        VipWatch {
            changes,
            macs,
            ..Default::default()
        }
    }

    pub fn owners(&self) -> Vec<String> {
        self.owners
            .iter()
            .map(|(n, d, a)| format!("{a} on {d} in netns {n}"))
            .collect()
    }

    pub fn note_mac(&mut self, addr: IpAddr, mac: &str) {
        if mac != "00:00:00:00:00:00" {
            self.macs.insert((addr, mac.to_string()));
        }
    }
}

pub fn diff(before: &BTreeSet<Owner>, now: &BTreeSet<Owner>, t_ms: u64) -> Vec<OwnerChange> {
    let mk = |(n, d, a): &Owner, event| OwnerChange {
        t_ms,
        netns: n.clone(),
        dev: d.clone(),
        addr: *a,
        event,
    };
    let mut v: Vec<OwnerChange> = before
        .difference(now)
        .map(|o| mk(o, OwnerEvent::Removed))
        .collect();
    v.extend(now.difference(before).map(|o| mk(o, OwnerEvent::Added)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(n: &str, a: &str) -> Owner {
        (n.into(), "eth0".into(), a.parse().unwrap())
    }

    #[test]
    fn owner_changes_are_the_difference() {
        let a: BTreeSet<Owner> = [o("node1", "10.0.0.99")].into();
        let b: BTreeSet<Owner> = [o("node2", "10.0.0.99")].into();
        let mut w = VipWatch::default();
        w.changes.extend(diff(&a, &b, 100));
        w.changes.extend(diff(&b, &a, 300));
        assert_eq!(w.changes.len(), 4);
        assert_eq!(w.changes[0].event, OwnerEvent::Removed);
        assert_eq!(w.changes[1].event, OwnerEvent::Added);
        assert!(diff(&a, &a, 5).is_empty());
    }

    #[test]
    fn the_null_mac_is_not_kept() {
        let vip: IpAddr = "10.0.0.99".parse().unwrap();
        let mut w = VipWatch::default();
        w.note_mac(vip, "aa:aa:aa:aa:aa:01");
        w.note_mac(vip, "00:00:00:00:00:00");
        assert_eq!(w.macs.len(), 1);
    }
}
