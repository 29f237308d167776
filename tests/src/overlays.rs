//! Overlays of the other kinds CNIs use, where this host cannot make them
//! (its kernel has neither CONFIG_NET_IPIP nor CONFIG_GENEVE) and the
//! kernel-matrix guests can (Debian's kernels ship both as modules): a
//! connection from a pod to a pod on another node, carried by Calico's
//! IPIP (`tunl0`: the ipip module's fallback device, no remote of its own, the
//! outer destination the route's gateway) or by Cilium's Geneve tunnel
//! mode (`cilium_geneve` in metadata mode, the endpoint in the route's
//! `encap ip id N dst NODE`, as Cilium's tunnel map holds it). Delivered:
//! the flow is followed into the tunnel and out of it on the far node.
//!
//! Address ranges: 10.174 (IPIP) and 10.175 (Geneve).

use anyhow::{Context, Result};

use crate::{
    blind_l2::exchange,
    blind_tunnel::two_nodes,
    netns::{Netns, unique_prefix},
    scenarios::{Scenario, listen, simple, tcp_connect},
};

pub const OVERLAYS: &[&str] = &["overlay_ipip", "overlay_geneve"];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "overlay_ipip" => ipip(),
        "overlay_geneve" => geneve(),
        _ => return None,
    })
}

/// Why this kernel cannot make a device of `kind` (`ipip`, `geneve`), if
/// it cannot: tried in a namespace of its own, removed after.
pub fn missing_device_kind(kind: &str) -> Option<String> {
    let ns = match crate::scenarios::ns(&unique_prefix(), &format!("probe-{kind}")) {
        Ok(ns) => ns,
        Err(e) => return Some(format!("no namespace to try a {kind} device in: {e:#}")),
    };
    // An ipip device with a remote of its own: one with neither local nor
    // remote is the namespace's fallback tunl0 (EEXIST once ipip is loaded).
    let args: &[&str] = match kind {
        "geneve" => &["link", "add", "g0", "type", "geneve", "external"],
        _ => &[
            "link",
            "add",
            "t0",
            "type",
            kind,
            "remote",
            "192.0.2.1",
            "local",
            "192.0.2.2",
        ],
    };
    ns.ip(args)
        .err()
        .map(|e| format!("this kernel makes no {kind} device ({e:#})"))
}

/// Calico's IPIP mode (`ipipMode: Always`): each node's `tunl0` (the
/// ipip module's fallback device of every namespace, neither local nor
/// remote) is up, and the route to the other node's pod CIDR goes by it
/// with that node's address as gateway (`10.174.2.0/24 via 10.174.0.2
/// dev tunl0 onlink`, what BIRD writes): ip_tunnel_xmit() takes the outer
/// destination from the route's next hop.
fn ipip() -> Result<Scenario> {
    let b = 174;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    for (node, peer) in [(&nss[1], 2), (&nss[2], 1)] {
        // tunl0 exists in a namespace made after the module loaded, unless
        // net.core.fb_tunnels_only_for_init_net keeps it to the first.
        if node.ip(&["link", "show", "tunl0"]).is_err() {
            node.ip(&["link", "add", "tunl0", "type", "ipip"])
                .context("an ipip device (module ipip)")?;
        }
        node.ip(&["link", "set", "tunl0", "up"])?;
        node.ip(&[
            "route",
            "add",
            &format!("10.{b}.{peer}.0/24"),
            "via",
            &format!("10.{b}.0.{peer}"),
            "dev",
            "tunl0",
            "onlink",
        ])?;
        // The decapsulated packet comes in by tunl0, and its source's
        // route goes out by tunl0 too.
    }
    overlay_scene(
        nss,
        b,
        "overlay_ipip",
        "Calico IPIP: pod to a pod on another node through tunl0",
    )
}

/// Cilium's tunnel mode with Geneve (`tunnel-protocol: geneve`):
/// `cilium_geneve` in metadata mode on both nodes, a permanent neighbour
/// entry for the other node's router address on it, and the route to the
/// other node's pod CIDR carrying the tunnel endpoint as its
/// encapsulation (`encap ip id 2 dst 10.175.0.2`).
fn geneve() -> Result<Scenario> {
    let b = 175;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    let macs = ["0e:75:00:00:00:01", "0e:75:00:00:00:02"];
    for (node, i) in [(&nss[1], 1usize), (&nss[2], 2)] {
        node.ip(&[
            "link",
            "add",
            "cilium_geneve",
            "address",
            macs[i - 1],
            "type",
            "geneve",
            "external",
        ])
        .context("a geneve device (module geneve)")?;
        node.ip(&["link", "set", "cilium_geneve", "up"])?;
    }
    for (node, peer) in [(&nss[1], 2usize), (&nss[2], 1)] {
        let router = format!("10.{b}.{peer}.1");
        node.ip(&[
            "neigh",
            "replace",
            &router,
            "lladdr",
            macs[peer - 1],
            "dev",
            "cilium_geneve",
            "nud",
            "permanent",
        ])?;
        node.ip(&[
            "route",
            "add",
            &format!("10.{b}.{peer}.0/24"),
            "encap",
            "ip",
            "id",
            &peer.to_string(),
            "dst",
            &format!("10.{b}.0.{peer}"),
            "via",
            &router,
            "dev",
            "cilium_geneve",
            "onlink",
        ])?;
    }
    overlay_scene(
        nss,
        b,
        "overlay_geneve",
        "Cilium tunnel mode, Geneve: pod to a pod on another node through cilium_geneve",
    )
}

/// The scene: pod2 listens on 10.B.2.2:8080, the pod connects once
/// before tracing (the overlay works) and once traced.
fn overlay_scene(
    nss: Vec<Netns>,
    b: u8,
    name: &'static str,
    what: &'static str,
) -> Result<Scenario> {
    let target = format!("10.{b}.2.2:8080");
    let srv = listen(&nss[3], &target, 15)?;
    exchange(&nss[0], &target)?;
    let mut sc = simple(name, what, nss, target.clone(), tcp_connect(&target));
    sc.servers.push(srv);
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_known_and_others_fall_through() {
        for n in OVERLAYS {
            assert!(n.starts_with("overlay_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }
}
