//! Node facts as evidence: the followed address's owners and MACs, IPVS
//! virtual services. The node layer reads them; only the verdict layer
//! knows what they mean for a flow.

use std::net::IpAddr;

use super::Evidence;
use crate::node::{
    ipvs::VirtualService,
    vip::{OwnerChange, VipWatch},
};

/// Facts for a flow to `dst`: its owner changes while tracing, and the
/// MACs that answered for it when more than one did.
pub fn owner_facts(vip: &VipWatch, dst: IpAddr) -> Vec<Evidence> {
    let mut ev = Vec::new();
    let changes: Vec<&OwnerChange> = vip.changes.iter().filter(|c| c.addr == dst).collect();
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
    let macs: Vec<String> = vip
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

/// The fact for a verdict; as text "IPVS virtual service TCP
/// 10.16.0.1:80 (rr) has 0 real servers".
pub fn ipvs_service(vs: &VirtualService) -> Evidence {
    Evidence::IpvsService {
        service: vs.name(),
        scheduler: vs.scheduler.clone(),
        real_servers: vs.servers.len(),
        usable: vs.usable(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::node::vip::{OwnerEvent, diff};

    #[test]
    fn owner_changes_and_macs() {
        let vip: IpAddr = "10.0.0.99".parse().unwrap();
        let o = |n: &str| -> BTreeSet<(String, String, IpAddr)> {
            [(n.to_string(), "eth0".to_string(), vip)].into()
        };
        let (a, b) = (o("node1"), o("node2"));
        let mut w = VipWatch::default();
        w.changes.extend(diff(&a, &b, 100));
        w.changes.extend(diff(&b, &a, 300));
        assert_eq!(w.changes[0].event, OwnerEvent::Removed);
        w.note_mac(vip, "aa:aa:aa:aa:aa:01");
        w.note_mac(vip, "aa:aa:aa:aa:aa:02");
        w.note_mac(vip, "00:00:00:00:00:00");
        let ev = owner_facts(&w, vip);
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
        let ev = owner_facts(&w, vip);
        assert!(
            matches!(&ev[0], Evidence::OwnerChanged { changes: 10, first, .. } if first.len() == 6)
        );
        assert!(ev[0].to_string().ends_with("at +400 ms; ...)"), "{}", ev[0]);
        assert!(owner_facts(&w, "10.0.0.1".parse().unwrap()).is_empty());
    }

    #[test]
    fn ipvs_service_text() {
        let t = crate::node::ipvs::parse(
            "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\nTCP  0A600001:01BB rr\n  -> 0A010102:1F90      Masq    1      0          0\n  -> 0A010103:1F90      Masq    0      0          0\n",
        );
        assert_eq!(
            ipvs_service(&t[0]).to_string(),
            "IPVS virtual service TCP 10.96.0.1:443 (rr) has 2 real servers, 1 with weight > 0"
        );
    }
}
