//! Who owns the followed address: which namespaces hold it on which device,
//! how often that changed while tracing, and which link-layer addresses
//! answered for it. Two controllers fighting over a LoadBalancer IP
//! (incident 1) show up as owner changes and several MACs.

use std::{collections::BTreeSet, net::IpAddr, path::PathBuf};

use serde::Serialize;

use crate::{model::target::Target, node::netns::addresses_in};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OwnerChange {
    /// Milliseconds since tracing started.
    pub t_ms: u64,
    pub netns: String,
    pub dev: String,
    pub addr: IpAddr,
    /// "added" or "removed".
    pub event: String,
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
    pub fn evidence(&self, dst: IpAddr) -> Vec<String> {
        let mut ev = Vec::new();
        let changes: Vec<&OwnerChange> = self.changes.iter().filter(|c| c.addr == dst).collect();
        if !changes.is_empty() {
            let list: Vec<String> = changes
                .iter()
                .take(6)
                .map(|c| format!("{} on {} in {} at +{} ms", c.event, c.dev, c.netns, c.t_ms))
                .collect();
            ev.push(format!(
                "{dst} changed owner {} times during the trace ({}{})",
                changes.len(),
                list.join("; "),
                if changes.len() > 6 { "; ..." } else { "" }
            ));
        }
        let macs: Vec<&str> = self
            .macs
            .iter()
            .filter(|(a, _)| *a == dst)
            .map(|(_, m)| m.as_str())
            .collect();
        if macs.len() > 1 {
            ev.push(format!(
                "{dst} was answered by {} MACs: {}",
                macs.len(),
                macs.join(", ")
            ));
        }
        ev
    }
}

pub fn diff(before: &BTreeSet<Owner>, now: &BTreeSet<Owner>, t_ms: u64) -> Vec<OwnerChange> {
    let mk = |(n, d, a): &Owner, event: &str| OwnerChange {
        t_ms,
        netns: n.clone(),
        dev: d.clone(),
        addr: *a,
        event: event.to_string(),
    };
    let mut v: Vec<OwnerChange> = before.difference(now).map(|o| mk(o, "removed")).collect();
    v.extend(now.difference(before).map(|o| mk(o, "added")));
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
        assert_eq!(w.changes[0].event, "removed");
        assert_eq!(w.changes[1].event, "added");
        w.note_mac(vip, "aa:aa:aa:aa:aa:01");
        w.note_mac(vip, "aa:aa:aa:aa:aa:02");
        w.note_mac(vip, "00:00:00:00:00:00");
        let ev = w.evidence(vip);
        assert!(
            ev[0].starts_with("10.0.0.99 changed owner 4 times"),
            "{ev:?}"
        );
        assert!(ev[1].contains("answered by 2 MACs"), "{ev:?}");
        assert!(w.evidence("10.0.0.1".parse().unwrap()).is_empty());
        assert!(diff(&a, &a, 5).is_empty());
    }
}
