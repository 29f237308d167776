use super::*;
#[allow(unused_imports, reason = "not every test file names both")]
use crate::verdict::{DropReason, Found};
use crate::{
    node::link::FdbEntry,
    verdict::{
        Inventory,
        rules::tests::{facts, judge as verdict_of, load, set_link},
    },
};

#[test]
fn signals_are_vxlan_xmit_and_otherhost() {
    for f in ["vxlan_xmit", "vxlan_xmit_one", "vxlan_xmit.cold"] {
        assert!(vxlan_xmit_func(f), "{f}");
    }
    for f in ["vxlan_rcv", "ip_rcv_core", "br_handle_frame_finish", ""] {
        assert!(!vxlan_xmit_func(f), "{f}");
    }
}

/// The refusals of a verdict.
fn refusals(v: &crate::verdict::Verdict) -> Vec<&TunnelRefusal> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::TunnelWillNotSend(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// Every VXLAN device `dev` of every namespace, changed by `f`.
fn set_vxlan(env: &mut Inventory, dev: &str, f: impl Fn(&mut LinkConf)) {
    set_link(env, dev, |l| {
        if l.vxlan.is_some() {
            f(l);
        }
    });
}

// On recordings of the blind VXLAN scenes (tests/src/blind_scenes.rs),
// with their near misses.

/// node1's flannel.1 has node2's VTEP in its neighbour table but no FDB
/// entry for its MAC (flannel-io/flannel#1155): vxlan_xmit() drops the
/// frame. The device, the next hop and its MAC are named.
#[test]
fn a_missing_fdb_entry_is_named() {
    let (f, mut env) = load("blind_vxlan_missing_fdb");
    let v = verdict_of(&f, &env);
    assert_eq!(v.kind, Kind::Dropped, "{v:?}");
    assert!(
        v.where_.starts_with("vxlan flannel.1 in netns ")
            && v.where_.contains("(VNI 1, port 8472): no FDB entry for ")
            && v.where_.contains("the next hop) and no default remote"),
        "{}",
        v.where_
    );
    let r = refusals(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(r[0].problem, TunnelProblem::NoFdbEntry);
    let mac = r[0].mac.clone().expect("the next hop's MAC");
    assert!(v.hint.contains("bridge fdb show dev"), "{}", v.hint);
    // Near miss: the entry is there (the drop is then not the FDB's).
    set_vxlan(&mut env, "flannel.1", |l| {
        if let Some(x) = l.vxlan.as_mut() {
            x.fdb.push(FdbEntry {
                mac: mac.clone(),
                dst: Some(IpAddr::from([10, 207, 0, 2])),
            });
        }
    });
    let v = verdict_of(&f, &env);
    assert!(refusals(&v).is_empty(), "{v:?}");
    assert!(v.where_.starts_with("vxlan_xmit in netns"), "{}", v.where_);
    // Near miss: no entry for it, but a default remote takes every MAC.
    set_vxlan(&mut env, "flannel.1", |l| {
        if let Some(x) = l.vxlan.as_mut() {
            x.fdb = vec![FdbEntry {
                mac: DEFAULT_FDB_MAC.into(),
                dst: Some(IpAddr::from([10, 207, 0, 2])),
            }];
        }
    });
    assert!(refusals(&verdict_of(&f, &env)).is_empty());
}

/// node1 resolves node2's VTEP to a stale MAC (flannel-io/flannel#1473):
/// node2's flannel.1 drops the decapsulated frames as another host's.
#[test]
fn a_stale_vtep_mac_is_named_on_the_far_side() {
    let (f, mut env) = load("blind_wrong_vtep_mac");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str()),
        (Kind::Dropped, "OTHERHOST"),
        "{v:?}"
    );
    let r = refusals(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(r[0].problem, TunnelProblem::MacMismatch);
    assert_eq!(r[0].mac.as_deref(), Some("0e:00:00:00:02:99"), "{v:?}");
    assert!(
        v.where_.contains("the frame came for 0e:00:00:00:02:99")
            && v.where_.contains("but this device's MAC is "),
        "{}",
        v.where_
    );
    assert!(v.hint.contains("ip neigh replace"), "{}", v.hint);
    // Near miss: the receiving device has that MAC after all.
    let node2 = r[0].netns.clone();
    let inode = f
        .hops
        .iter()
        .find(|h| *h.netns == *node2)
        .map(|h| h.netns_inode)
        .expect("node2's hops");
    for l in env.links.get_mut(&inode).expect("node2's links") {
        if l.vxlan.is_some() {
            l.mac = Some("0e:00:00:00:02:99".into());
        }
    }
    let v = verdict_of(&f, &env);
    assert!(refusals(&v).is_empty(), "{v:?}");
}

// Written blind after the rule (tests/src/blind_tunnel.rs), with their
// near misses.

/// Felix deleted node1's ARP entry for node2's VTEP on vxlan.calico, a
/// device that does not learn (projectcalico/calico#9450): the neighbour
/// failure is named with the device that cannot resolve it.
#[test]
fn a_missing_vtep_neighbour_is_named() {
    let (f, mut env) = load("blind_tun_vtep_arp_deleted");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str()),
        (Kind::Dropped, "NEIGH_FAILED"),
        "{v:?}"
    );
    let r = refusals(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(r[0].problem, TunnelProblem::NoNeighbour);
    assert_eq!(r[0].next_hop, Some(IpAddr::from([10, 180, 2, 0])), "{v:?}");
    assert!(
        v.where_.contains("; vxlan vxlan.calico in netns ")
            && v.where_.contains("learning off, no default remote"),
        "{}",
        v.where_
    );
    assert!(v.hint.contains("Deleting ARP entry"), "{}", v.hint);
    // Near miss: the device learns (it could resolve by itself: the
    // failure is then the remote's, not the missing entry).
    set_vxlan(&mut env, "vxlan.calico", |l| {
        if let Some(x) = l.vxlan.as_mut() {
            x.learning = true;
        }
    });
    let v = verdict_of(&f, &env);
    assert!(refusals(&v).is_empty(), "{v:?}");
    assert!(!v.hint.contains("Deleting ARP entry"), "{}", v.hint);
    // Near miss: the entry is there and permanent.
    set_vxlan(&mut env, "vxlan.calico", |l| {
        if let Some(x) = l.vxlan.as_mut() {
            x.learning = false;
            x.neighbours.push(crate::node::link::NeighEntry {
                addr: IpAddr::from([10, 180, 2, 0]),
                mac: Some("ee:ee:00:00:02:00".into()),
                state: 0x80,
            });
        }
    });
    assert!(refusals(&verdict_of(&f, &env)).is_empty());
}

/// Every node published the same public IP (flannel on Vagrant's NAT
/// interface, flannel-io/flannel#764): node1's FDB entry for node2's
/// VTEP sends to its own address, and the packet loops until its TTL
/// runs out.
#[test]
fn an_fdb_entry_to_this_node_itself_is_named() {
    let (f, mut env) = load("blind_tun_same_public_ip");
    let v = verdict_of(&f, &env);
    assert_eq!(v.kind, Kind::Dropped, "{v:?}");
    let r = refusals(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(r[0].problem, TunnelProblem::FdbToSelf);
    assert_eq!(r[0].vtep, Some(IpAddr::from([10, 181, 15, 15])), "{v:?}");
    assert!(
        v.where_.starts_with("vxlan flannel.1 in netns ")
            && v.where_.contains("an address of this namespace itself"),
        "{}",
        v.where_
    );
    assert!(v.hint.contains("--iface"), "{}", v.hint);
    // Near miss: the entry sends to another node's address.
    set_vxlan(&mut env, "flannel.1", |l| {
        if let Some(x) = l.vxlan.as_mut() {
            for e in &mut x.fdb {
                e.dst = Some(IpAddr::from([192, 0, 2, 77]));
            }
        }
    });
    let v = verdict_of(&f, &env);
    assert!(refusals(&v).is_empty(), "{v:?}");
    assert!(!v.hint.contains("--iface"), "{}", v.hint);
}
