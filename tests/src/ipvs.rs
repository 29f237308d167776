//! Scenarios with real IPVS (kube-proxy's IPVS mode): virtual services made
//! with ipvsadm and Service IPs bound on a dummy device named kube-ipvs0.
//! They need a kernel with the ip_vs, ip_vs_rr and dummy modules (the
//! Debian kernels of `cargo xtask vm`); [`ipvs_unavailable`] says why not.

use anyhow::Result;

use crate::{
    netns::{Netns, run, unique_prefix, veth},
    scenarios::{Scenario, listen, ns, simple, tcp_connect},
};

/// Load the modules a kube-proxy IPVS node has; None when IPVS, dummy
/// devices and ipvsadm are all usable, else why not.
pub fn ipvs_unavailable() -> Option<String> {
    for m in ["ip_vs", "ip_vs_rr", "dummy"] {
        let _ = run(&["modprobe", "-q", m]);
    }
    if !std::path::Path::new("/proc/net/ip_vs").exists() {
        return Some(
            "no IPVS in this kernel (/proc/net/ip_vs missing after modprobe ip_vs)".into(),
        );
    }
    if !std::path::Path::new("/sys/module/dummy").exists() {
        return Some("no dummy device support (modprobe dummy failed)".into());
    }
    if run(&["ipvsadm", "--version"]).is_err() {
        return Some("ipvsadm not installed".into());
    }
    None
}

/// kube-ipvs0: a dummy device holding Service IPs, down (as kube-proxy
/// leaves it: the addresses are local, the device never carries packets).
fn kube_ipvs0(n: &Netns, addrs: &[&str]) -> Result<()> {
    n.ip(&["link", "add", "kube-ipvs0", "type", "dummy"])?;
    for a in addrs {
        n.ip(&["addr", "add", a, "dev", "kube-ipvs0"])?;
    }
    Ok(())
}

fn ipvsadm(n: &Netns, args: &[&str]) -> Result<()> {
    let mut v = vec!["ipvsadm"];
    v.extend_from_slice(args);
    n.exec(&v)?;
    Ok(())
}

/// Incident 2 with real IPVS: the router sends the LB IP to the master,
/// whose IPVS virtual service for it has no real server (the only endpoint
/// runs on the worker, externalTrafficPolicy Local).
pub fn incident2_ipvs() -> Result<Scenario> {
    let p = unique_prefix();
    let (laptop, router, master, worker) = (
        ns(&p, "laptop")?,
        ns(&p, "router")?,
        ns(&p, "master")?,
        ns(&p, "worker")?,
    );
    veth(&laptop, "eth0", &router, "lan0")?;
    veth(&router, "k0", &master, "eth0")?;
    veth(&router, "k1", &worker, "eth0")?;
    laptop.ip(&["addr", "add", "10.232.1.2/24", "dev", "eth0"])?;
    laptop.ip(&["route", "add", "default", "via", "10.232.1.1"])?;
    router.ip(&["addr", "add", "10.232.1.1/24", "dev", "lan0"])?;
    router.ip(&["addr", "add", "10.232.2.1/24", "dev", "k0"])?;
    router.ip(&["addr", "add", "10.232.3.1/24", "dev", "k1"])?;
    router.sysctl("net.ipv4.ip_forward", "1")?;
    router.ip(&["route", "add", "10.16.232.1/32", "via", "10.232.2.10"])?;
    master.ip(&["addr", "add", "10.232.2.10/24", "dev", "eth0"])?;
    master.ip(&["route", "add", "default", "via", "10.232.2.1"])?;
    worker.ip(&["addr", "add", "10.232.3.10/24", "dev", "eth0"])?;
    worker.ip(&["route", "add", "default", "via", "10.232.3.1"])?;
    kube_ipvs0(&master, &["10.16.232.1/32"])?;
    // The virtual service exists; kube-proxy gives it no real server on a
    // node without a local endpoint.
    ipvsadm(&master, &["-A", "-t", "10.16.232.1:80", "-s", "rr"])?;
    let srv = listen(&worker, "10.232.3.10:80", 15)?;
    let mut sc = simple(
        "incident2_ipvs",
        "incident 2 with IPVS: the LB IP is routed to the master, whose IPVS virtual service has no real server; ping works, TCP hangs",
        vec![laptop, router, master, worker],
        "10.16.232.1:80".into(),
        tcp_connect("10.16.232.1:80"),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// A ClusterIP served by IPVS NAT: the client's node (director) holds
/// 10.96.233.1 on kube-ipvs0 and IPVS schedules to the backend's port 8080.
pub fn ipvs_nat() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, node, backend) = (ns(&p, "client")?, ns(&p, "node")?, ns(&p, "backend")?);
    veth(&client, "eth0", &node, "c0")?;
    veth(&node, "b0", &backend, "eth0")?;
    client.ip(&["addr", "add", "10.233.1.2/24", "dev", "eth0"])?;
    client.ip(&["route", "add", "default", "via", "10.233.1.1"])?;
    node.ip(&["addr", "add", "10.233.1.1/24", "dev", "c0"])?;
    node.ip(&["addr", "add", "10.233.2.1/24", "dev", "b0"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    backend.ip(&["addr", "add", "10.233.2.2/24", "dev", "eth0"])?;
    backend.ip(&["route", "add", "default", "via", "10.233.2.1"])?;
    kube_ipvs0(&node, &["10.96.233.1/32"])?;
    ipvsadm(&node, &["-A", "-t", "10.96.233.1:80", "-s", "rr"])?;
    ipvsadm(
        &node,
        &[
            "-a",
            "-t",
            "10.96.233.1:80",
            "-r",
            "10.233.2.2:8080",
            "-m",
            "-w",
            "1",
        ],
    )?;
    let srv = listen(&backend, "10.233.2.2:8080", 15)?;
    let mut sc = simple(
        "ipvs_nat",
        "a ClusterIP served by IPVS NAT (masquerade) to one real server",
        vec![client, node, backend],
        "10.96.233.1:80".into(),
        tcp_connect("10.96.233.1:80"),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// Incident 5 with real IPVS: a Service externalIP equal to node2's IP is a
/// virtual service on node1 and bound on node1's kube-ipvs0 (a dummy
/// device); node1 connects to node2:22 and reaches itself.
pub fn incident5_ipvs() -> Result<Scenario> {
    let p = unique_prefix();
    let (n1, n2) = (ns(&p, "node1")?, ns(&p, "node2")?);
    veth(&n1, "eth0", &n2, "eth0")?;
    n1.ip(&["addr", "add", "10.234.0.8/24", "dev", "eth0"])?;
    n2.ip(&["addr", "add", "10.234.0.9/24", "dev", "eth0"])?;
    kube_ipvs0(&n1, &["10.234.0.9/32"])?;
    ipvsadm(&n1, &["-A", "-t", "10.234.0.9:80", "-s", "rr"])?;
    ipvsadm(
        &n1,
        &[
            "-a",
            "-t",
            "10.234.0.9:80",
            "-r",
            "10.234.0.8:8080",
            "-m",
            "-w",
            "1",
        ],
    )?;
    Ok(simple(
        "incident5_ipvs",
        "incident 5 with IPVS: a Service externalIP:80 equal to node2's IP is an IPVS virtual service on node1 (bound on kube-ipvs0); node1 connects to node2:22",
        vec![n1, n2],
        "10.234.0.9:22".into(),
        tcp_connect("10.234.0.9:22"),
    ))
}
