//! Scenes of an eBPF dataplane's drops (issue 30): a client, a node and a
//! server (scenarios::routed: the node routes between the pods' veths,
//! r0 toward the client, r1 toward the server), with a dropping program
//! of the tests' own (bpfdrop.rs) where Cilium and Calico put theirs.
//! Not in `scenarios::NAMES` (the `--netns` sweep and the kernel matrix
//! do not trace them); `scenarios::build` falls back to [`build`].
//! Address ranges 10.177, 10.179, 10.187, 10.189, 10.191, 10.193-10.195, and
//! 10.190.50-51 for the
//! socket-level redirect of incident 3's fix (blind_sock.rs's pods).

use anyhow::Result;

use crate::{
    bpfdrop::{Attach, Dropper, TCP, UDP, XdpVerdict, tcx_supported},
    scenarios::{Scenario, ScratchDir, listen, routed, serve, simple, strings, tcp_connect},
};

pub const DATAPLANE: &[&str] = &[
    "dp_tc_from_pod_drop",
    "dp_tcx_to_pod_drop",
    "dp_xdp_drop",
    "dp_tc_passes_closed_port",
    "incident3_lrp",
    "dp_tc_service_dnat",
    "dp_xdp_redirect_down",
    "dp_xdp_tx_back",
    "dp_xdp_native_drop",
    "dp_xdp_devmap_down",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "dp_tc_from_pod_drop" => tc_from_pod_drop(),
        "dp_tcx_to_pod_drop" => tcx_to_pod_drop(),
        "dp_xdp_drop" => xdp_drop(),
        "dp_tc_passes_closed_port" => tc_passes_closed_port(),
        "incident3_lrp" => incident3_lrp(),
        "dp_tc_service_dnat" => tc_service_dnat(),
        "dp_xdp_redirect_down" => xdp_redirect_down(),
        "dp_xdp_tx_back" => xdp_tx_back(),
        "dp_xdp_native_drop" => xdp_native_drop(),
        "dp_xdp_devmap_down" => xdp_devmap_down(),
        _ => return None,
    })
}

/// The client pod's egress policy, as Cilium enforces it: a program on
/// the tc ingress of the pod's host-side veth (cil_from_container) drops
/// its TCP connections to port 8080 (clsact, as before tcx).
fn tc_from_pod_drop() -> Result<Scenario> {
    let nss = routed(191)?;
    let srv = listen(&nss[2], "10.191.2.2:8080", 15)?;
    let d = Dropper::install(
        &nss[1],
        "r0",
        Attach::Clsact { ingress: true },
        "cil_from_contai",
        TCP,
        8080,
    )?;
    let mut sc = simple(
        "dp_tc_from_pod_drop",
        "a tc BPF program (clsact ingress of the client pod's host-side veth) drops its TCP to 10.191.2.2:8080, as a NetworkPolicy egress deny",
        nss,
        "10.191.2.2:8080".into(),
        tcp_connect("10.191.2.2:8080"),
    );
    sc.servers.push(srv);
    sc.droppers.push(d);
    Ok(sc)
}

/// The server pod's ingress policy: a program on the tc egress of its
/// host-side veth (cil_to_container) drops TCP to port 8080, attached by
/// a tcx link where the kernel has tcx (6.6+), by clsact before.
fn tcx_to_pod_drop() -> Result<Scenario> {
    let nss = routed(193)?;
    let srv = listen(&nss[2], "10.193.2.2:8080", 15)?;
    let attach = if tcx_supported() {
        Attach::Tcx { ingress: false }
    } else {
        Attach::Clsact { ingress: false }
    };
    let d = Dropper::install(&nss[1], "r1", attach, "cil_to_contain", TCP, 8080)?;
    let mut sc = simple(
        "dp_tcx_to_pod_drop",
        "a tc BPF program (tcx egress of the server pod's host-side veth) drops TCP to 10.193.2.2:8080, as a NetworkPolicy ingress deny",
        nss,
        "10.193.2.2:8080".into(),
        tcp_connect("10.193.2.2:8080"),
    );
    sc.servers.push(srv);
    sc.droppers.push(d);
    Ok(sc)
}

/// An XDP program (generic mode) on the node's device toward the client
/// drops UDP to port 53, as a prefilter or an XDP do-not-track deny.
fn xdp_drop() -> Result<Scenario> {
    let nss = routed(194)?;
    let srv = serve(&nss[2], "udp-echo", "10.194.2.2:53", 15)?;
    let d = Dropper::install(&nss[1], "r0", Attach::XdpGeneric, "cil_xdp_entry", UDP, 53)?;
    let t = crate::scaled_arg(1000);
    let mut sc = simple(
        "dp_xdp_drop",
        "an XDP program (generic) on the node's device toward the client drops its UDP to 10.194.2.2:53",
        nss,
        "10.194.2.2:53".into(),
        strings(&["udp-send", "10.194.2.2:53", "--timeout-ms", &t]),
    );
    sc.servers.push(srv);
    sc.droppers.push(d);
    Ok(sc)
}

/// [`xdp_drop`] in native (driver) mode, as on a NIC whose driver runs
/// XDP: veth runs the program in its NAPI poll on a copy of the frame,
/// and frees what it drops in veth_xdp_rcv_skb().
fn xdp_native_drop() -> Result<Scenario> {
    let nss = routed(179)?;
    let srv = serve(&nss[2], "udp-echo", "10.179.2.2:53", 15)?;
    let d = Dropper::install(&nss[1], "r0", Attach::XdpDriver, "cil_xdp_entry", UDP, 53)?;
    let t = crate::scaled_arg(1000);
    let mut sc = simple(
        "dp_xdp_native_drop",
        "an XDP program (native, driver mode) on the node's device toward the client drops its UDP to 10.179.2.2:53",
        nss,
        "10.179.2.2:53".into(),
        strings(&["udp-send", "10.179.2.2:53", "--timeout-ms", &t]),
    );
    sc.servers.push(srv);
    sc.droppers.push(d);
    Ok(sc)
}

/// [`xdp_redirect_down`] through a device map, as Cilium's and Katran's
/// XDP programs redirect (bpf_redirect_map()): the map's entry at key 7
/// is r2, which is down. The tracepoint names the map and key, not the
/// device: the entry is read from the map.
fn xdp_devmap_down() -> Result<Scenario> {
    let nss = routed(177)?;
    crate::netns::veth(&nss[1], "r2", &nss[2], "s1")?;
    nss[1].ip(&["link", "set", "r2", "down"])?;
    let r2 = crate::bpfdrop::ifindex(&nss[1], "r2")?;
    let srv = serve(&nss[2], "udp-echo", "10.177.2.2:53", 15)?;
    // Key 7 holds r2, set from the router's namespace.
    let map_fd = crate::blind_xdp::devmap(&nss[1], "tx_port", &[])?;
    let put = crate::blind_xdp::devmap_put(&nss[1], map_fd, 7, r2);
    let d = put.and_then(|()| {
        Dropper::xdp(
            &nss[1],
            "r0",
            "xdp_lb_map",
            UDP,
            53,
            XdpVerdict::RedirectMap { map_fd, key: 7 },
        )
    });
    // The program holds the map now; the loader's fd is not needed.
    unsafe { libc::close(map_fd) };
    let d = d?;
    let t = crate::scaled_arg(1000);
    let mut sc = simple(
        "dp_xdp_devmap_down",
        "an XDP program (generic) on the node's device toward the client redirects its UDP to 10.177.2.2:53 through a device map to r2, a device that is down",
        nss,
        "10.177.2.2:53".into(),
        strings(&["udp-send", "10.177.2.2:53", "--timeout-ms", &t]),
    );
    sc.servers.push(srv);
    sc.droppers.push(d);
    Ok(sc)
}

/// An XDP program (generic) on the node's device toward the client
/// redirects UDP to port 53 to a device that is down (r2, a second link
/// to the server, set down): the kernel refuses the redirect (ENETDOWN,
/// xdp_ok_fwd_dev()) and drops the packet.
fn xdp_redirect_down() -> Result<Scenario> {
    let nss = routed(180)?;
    crate::netns::veth(&nss[1], "r2", &nss[2], "s1")?;
    nss[1].ip(&["link", "set", "r2", "down"])?;
    let r2 = crate::bpfdrop::ifindex(&nss[1], "r2")?;
    let srv = serve(&nss[2], "udp-echo", "10.180.2.2:53", 15)?;
    let d = Dropper::xdp(
        &nss[1],
        "r0",
        "xdp_lb_redir",
        UDP,
        53,
        XdpVerdict::Redirect(r2),
    )?;
    let t = crate::scaled_arg(1000);
    let mut sc = simple(
        "dp_xdp_redirect_down",
        "an XDP program (generic) on the node's device toward the client redirects its UDP to 10.180.2.2:53 to r2, a device that is down",
        nss,
        "10.180.2.2:53".into(),
        strings(&["udp-send", "10.180.2.2:53", "--timeout-ms", &t]),
    );
    sc.servers.push(srv);
    sc.droppers.push(d);
    Ok(sc)
}

/// An XDP program (generic) on the node's device toward the client sends
/// UDP to port 53 back out that device unchanged (XDP_TX, as a responder
/// that forgot to swap the addresses): the client receives its own frame,
/// addressed to the node's MAC, and drops it (OTHERHOST).
fn xdp_tx_back() -> Result<Scenario> {
    let nss = routed(181)?;
    let srv = serve(&nss[2], "udp-echo", "10.181.2.2:53", 15)?;
    let d = Dropper::xdp(&nss[1], "r0", "xdp_responder", UDP, 53, XdpVerdict::Tx)?;
    let t = crate::scaled_arg(1000);
    let mut sc = simple(
        "dp_xdp_tx_back",
        "an XDP program (generic) on the node's device toward the client sends its UDP to 10.181.2.2:53 back out that device (XDP_TX) unchanged",
        nss,
        "10.181.2.2:53".into(),
        strings(&["udp-send", "10.181.2.2:53", "--timeout-ms", &t]),
    );
    sc.servers.push(srv);
    sc.droppers.push(d);
    Ok(sc)
}

/// The honest trap: a tc program on the client's veth that drops another
/// port lets this connection through; nothing listens on 8081, and the
/// verdict must say so, not blame the program.
fn tc_passes_closed_port() -> Result<Scenario> {
    let nss = routed(195)?;
    let d = Dropper::install(
        &nss[1],
        "r0",
        Attach::Clsact { ingress: true },
        "cil_from_contai",
        TCP,
        9999,
    )?;
    let mut sc = simple(
        "dp_tc_passes_closed_port",
        "a tc BPF program that drops another port lets TCP to 10.195.2.2:8081 through; nothing listens there",
        nss,
        "10.195.2.2:8081".into(),
        tcp_connect("10.195.2.2:8081"),
    );
    sc.droppers.push(d);
    Ok(sc)
}

/// Incident 3's fix as Cilium ships it: a Local Redirect Policy for
/// node-local DNS. The pod's DNS to the link-local 169.254.25.10:53 is
/// rewritten in sendto() by a sendmsg4 program to the node-local-dns
/// pod (10.190.51.2:53), and the answer's source back by a recvmsg4
/// program, so no tc redirect ever sees a packet for 169.254.25.10: the
/// resolver, which takes an answer only from the address it asked, gets
/// it.
fn incident3_lrp() -> Result<Scenario> {
    use crate::blind_sock::{Cgroup, addr, dns_query, node_with_pods, scene};
    let p = crate::netns::unique_prefix();
    let (pods, node) = node_with_pods(&p, &[("client", 50), ("nodelocaldns", 51)])?;
    let nld = serve(&pods[1], "dns-serve", "10.190.51.2:53", 15)?;
    let target = "169.254.25.10:53";
    let mut cg = Cgroup::new("pod")?;
    cg.sendmsg4(addr(target), addr("10.190.51.2:53"))?;
    cg.recvmsg4(addr(target), addr("10.190.51.2:53"))?;
    let mut sc = scene(
        "incident3_lrp",
        "incident 3 fixed: a Local Redirect Policy's sendmsg4/recvmsg4 programs send the pod's DNS for 169.254.25.10:53 to the node-local-dns pod, which answers",
        (pods, node),
        target,
        dns_query(target, &["--expect-source"]),
        vec![cg],
    );
    sc.servers.push(nld);
    Ok(sc)
}

/// A Service translated in tc, as Cilium's kube-proxy replacement does
/// without socket-level load balancing (bpf_lxc's per-packet service
/// lookup): the client pod's host-side veth r0 has a from-container
/// program (a tcx link where the kernel has tcx, clsact before) that
/// sends the ClusterIP 10.189.9.9:80 to the server pod 10.189.2.2:8080;
/// the server's veth r1 one (clsact ingress) that gives its replies the
/// Service address back. No conntrack entry knows of either rewrite, and
/// the connection is answered.
fn tc_service_dnat() -> Result<Scenario> {
    let nss = routed(189)?;
    let srv = listen(&nss[2], "10.189.2.2:8080", 15)?;
    let pins = crate::blind_bpf::bpf_dir(&crate::netns::unique_prefix())?;
    service_dnat(&nss, 189, &pins)?;
    let mut sc = simple(
        "dp_tc_service_dnat",
        "a tc program on the client pod's veth sends the Service 10.189.9.9:80 to the server pod 10.189.2.2:8080, one on the server's veth translates the replies back; answered",
        nss,
        "10.189.9.9:80".into(),
        tcp_connect("10.189.9.9:80"),
    );
    sc.servers.push(srv);
    sc.scratch.push(pins);
    Ok(sc)
}

/// On `routed(b)`'s router: a tc program on r0's ingress (tcx where the
/// kernel has it) that sends the Service 10.B.9.9:80 to 10.B.2.2:8080,
/// and one on r1's ingress that translates the replies back, pinned under
/// `pins`.
fn service_dnat(nss: &[crate::netns::Netns], b: u8, pins: &ScratchDir) -> Result<()> {
    use crate::bpfnat::{Dir, Link, attach, dnat, rev_snat};
    let (vip, backend) = (
        format!("10.{b}.9.9").parse()?,
        format!("10.{b}.2.2").parse()?,
    );
    let link = if tcx_supported() {
        Link::Tcx
    } else {
        Link::Clsact
    };
    attach(
        &nss[1],
        "r0",
        Dir::Ingress,
        link,
        pins,
        "r0-from-container",
        &dnat(TCP, vip, 80, backend, 8080),
        "cil_from_container",
    )?;
    attach(
        &nss[1],
        "r1",
        Dir::Ingress,
        Link::Clsact,
        pins,
        "r1-from-container",
        &rev_snat(TCP, backend, 8080, vip, 80),
        "cil_from_container",
    )
}

/// [`xdp_redirect_down`] with its XDP program loaded only when asked
/// ([`LateXdp::load`]): for a tracer that started before it, as before a
/// Cilium agent that starts or restarts.
pub struct LateXdp {
    pub nss: Vec<crate::netns::Netns>,
    _srv: crate::netns::Child,
    r2: u32,
}

impl LateXdp {
    /// The namespaces of `routed(b)`, r2 down, a UDP echo on 10.B.2.2:53.
    pub fn new(b: u8) -> Result<LateXdp> {
        let nss = routed(b)?;
        crate::netns::veth(&nss[1], "r2", &nss[2], "s1")?;
        nss[1].ip(&["link", "set", "r2", "down"])?;
        let r2 = crate::bpfdrop::ifindex(&nss[1], "r2")?;
        let srv = serve(&nss[2], "udp-echo", &format!("10.{b}.2.2:53"), 30)?;
        Ok(LateXdp { nss, _srv: srv, r2 })
    }

    /// The program on r0 that redirects UDP to port 53 to r2.
    pub fn load(&self) -> Result<Dropper> {
        Dropper::xdp(
            &self.nss[1],
            "r0",
            "xdp_lb_redir",
            UDP,
            53,
            XdpVerdict::Redirect(self.r2),
        )
    }
}

/// The Service scene of `dp_tc_service_dnat` with its tc programs loaded
/// later ([`LateNat::load`]), as a Cilium agent's when it starts or
/// restarts after tracer: no program of others on the node before.
pub struct LateNat {
    pub nss: Vec<crate::netns::Netns>,
    _srv: crate::netns::Child,
    b: u8,
}

impl LateNat {
    /// The namespaces of `routed(b)` and a server on 10.B.2.2:8080.
    pub fn new(b: u8) -> Result<LateNat> {
        let nss = routed(b)?;
        let srv = listen(&nss[2], &format!("10.{b}.2.2:8080"), 30)?;
        Ok(LateNat { nss, _srv: srv, b })
    }

    /// Attach the Service's programs; they go with the directory returned.
    pub fn load(&self) -> Result<ScratchDir> {
        let pins = crate::blind_bpf::bpf_dir(&crate::netns::unique_prefix())?;
        service_dnat(&self.nss, self.b, &pins)?;
        Ok(pins)
    }
}
