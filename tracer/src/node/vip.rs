//! Who owns the followed address: which namespaces hold it on which device,
//! how often that changed while tracing, and which link-layer addresses
//! answered for it. Two controllers fighting over a LoadBalancer IP
//! (incident 1) show up as owner changes and several MACs.

use std::{collections::BTreeSet, net::IpAddr, path::PathBuf};

use serde::{Deserialize, Serialize};

use crate::{model::target::Target, node::netns::addresses_in, verdict::Evidence};

/// Whether an owner change added or removed the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
type Owner = (String, String, IpAddr);

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

    fn current(&self, target: &Target) -> BTreeSet<Owner> {
        let mut now = BTreeSet::new();
        for (label, path) in &self.watched {
            for a in addresses_in(path).unwrap_or_default() {
                if target.contains(a.addr) {
                    now.insert((label.clone(), a.dev, a.addr));
                }
            }
        }
        now
    }

    /// First look: who owns it when tracing starts (not a change).
    pub fn start(&mut self, target: &Target) {
        self.owners = self.current(target);
    }

    /// Poll again and record what was added or removed.
    pub fn poll(&mut self, target: &Target, t_ms: u64) {
        let now = self.current(target);
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

    /// Facts for a flow to `dst`.
    pub fn evidence(&self, dst: IpAddr) -> Vec<Evidence> {
        let mut ev = Vec::new();
        let changes: Vec<&OwnerChange> = self.changes.iter().filter(|c| c.addr == dst).collect();
        if !changes.is_empty() {
            ev.push(Evidence::OwnerChanged {
                addr: dst,
                changes: changes.len(),
                first: changes
                    .iter()
                    .take(Evidence::OWNER_CHANGES_LISTED)
                    .map(|c| (*c).clone())
                    .collect(),
            });
        }
        let macs: Vec<String> = self
            .macs
            .iter()
            .filter(|(a, _)| *a == dst)
            .map(|(_, m)| m.clone())
            .collect();
        if macs.len() > 1 {
            ev.push(Evidence::SeveralMacs { addr: dst, macs });
        }
        ev
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
    fn owner_changes_and_macs() {
        let vip: IpAddr = "10.0.0.99".parse().unwrap();
        let a: BTreeSet<Owner> = [o("node1", "10.0.0.99")].into();
        let b: BTreeSet<Owner> = [o("node2", "10.0.0.99")].into();
        let mut w = VipWatch::default();
        w.changes.extend(diff(&a, &b, 100));
        w.changes.extend(diff(&b, &a, 300));
        assert_eq!(w.changes.len(), 4);
        assert_eq!(w.changes[0].event, OwnerEvent::Removed);
        assert_eq!(w.changes[1].event, OwnerEvent::Added);
        w.note_mac(vip, "aa:aa:aa:aa:aa:01");
        w.note_mac(vip, "aa:aa:aa:aa:aa:02");
        w.note_mac(vip, "00:00:00:00:00:00");
        let ev = w.evidence(vip);
        assert!(
            matches!(&ev[0], Evidence::OwnerChanged { addr, changes: 4, first } if *addr == vip && first.len() == 4),
            "{ev:?}"
        );
        assert_eq!(
            ev[0].to_string(),
            "10.0.0.99 changed owner 4 times during the trace (removed on eth0 in node1 at +100 ms; \
             added on eth0 in node2 at +100 ms; removed on eth0 in node2 at +300 ms; \
             added on eth0 in node1 at +300 ms)"
        );
        assert_eq!(
            ev[1],
            Evidence::SeveralMacs {
                addr: vip,
                macs: vec!["aa:aa:aa:aa:aa:01".into(), "aa:aa:aa:aa:aa:02".into()]
            }
        );
        assert_eq!(
            ev[1].to_string(),
            "10.0.0.99 was answered by 2 MACs: aa:aa:aa:aa:aa:01, aa:aa:aa:aa:aa:02"
        );
        // Past six changes the list ends with "...", the count stays whole.
        for t in 0..3 {
            w.changes.extend(diff(&a, &b, 400 + t));
        }
        let ev = w.evidence(vip);
        assert!(
            matches!(&ev[0], Evidence::OwnerChanged { changes: 10, first, .. } if first.len() == 6)
        );
        assert!(ev[0].to_string().ends_with("at +400 ms; ...)"), "{}", ev[0]);
        assert!(w.evidence("10.0.0.1".parse().unwrap()).is_empty());
        assert!(diff(&a, &a, 5).is_empty());
    }
}
