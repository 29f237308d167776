//! Per-device configuration of a namespace that explains drops: each
//! link's MTU (RTM_GETLINK) and its forwarding and reverse-path sysctls
//! (/proc/sys/net/ipv{4,6}/conf/DEV/..., which show the namespace of the
//! reading thread).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// One device's facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkConf {
    pub dev: String,
    pub mtu: u32,
    /// net.ipv4.conf.DEV.forwarding (None: unreadable, e.g. no IPv4).
    #[serde(default)]
    pub forwarding_v4: Option<bool>,
    /// Whether IPv6 forwards what DEV receives: ip6_forward() reads
    /// net.ipv6.conf.all.forwarding (and, since 6.17, the device's
    /// force_forwarding), not the device's own `forwarding`.
    #[serde(default)]
    pub forwarding_v6: Option<bool>,
    /// The reverse-path filter mode that applies on DEV: the larger of
    /// net.ipv4.conf.DEV.rp_filter and net.ipv4.conf.all.rp_filter
    /// (IN_DEV_RPFILTER() is IN_DEV_MAXCONF(), include/linux/inetdevice.h);
    /// 0 off, 1 strict, 2 loose.
    #[serde(default)]
    pub rp_filter: Option<u8>,
}

/// The links of the namespace at `path` (entered on this thread), or of
/// this thread's namespace when None. Empty when nothing can be read.
pub fn links_in(path: Option<&Path>) -> Vec<LinkConf> {
    let _g = match path.map(crate::node::netns::NetnsGuard::enter) {
        Some(Ok(g)) => Some(g),
        Some(Err(_)) => return Vec::new(),
        None => None,
    };
    let mut out = rtnl_mtus().unwrap_or_default();
    let read = |p: String| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u8>().ok())
    };
    let all_rp = read("/proc/sys/net/ipv4/conf/all/rp_filter".into()).unwrap_or(0);
    let all_v6 = read("/proc/sys/net/ipv6/conf/all/forwarding".into());
    for l in &mut out {
        l.forwarding_v4 =
            read(format!("/proc/sys/net/ipv4/conf/{}/forwarding", l.dev)).map(|v| v != 0);
        let force = read(format!(
            "/proc/sys/net/ipv6/conf/{}/force_forwarding",
            l.dev
        ));
        l.forwarding_v6 = all_v6.map(|v| v != 0 || force.is_some_and(|f| f != 0));
        l.rp_filter =
            read(format!("/proc/sys/net/ipv4/conf/{}/rp_filter", l.dev)).map(|v| v.max(all_rp));
    }
    out
}

/// Every link of this thread's namespace, by one RTM_GETLINK dump: its
/// name and its attributes (include/uapi/linux/if_link.h) to `each`.
pub fn each_link(each: &mut dyn FnMut(&str, &[u8])) -> Option<()> {
    const IFLA_IFNAME: u16 = 3;
    // ifinfomsg: family, pad, type, index, flags, change (16 bytes).
    let body = [0u8; 16];
    super::netlink::dump(
        libc::NETLINK_ROUTE,
        libc::RTM_GETLINK,
        &body,
        &mut |ty, msg| {
            if ty != libc::RTM_NEWLINK {
                return;
            }
            // nlmsghdr and ifinfomsg, then the attributes.
            let attrs = msg.get(32..).unwrap_or(&[]);
            if let Some(name) = super::netlink::attr(attrs, IFLA_IFNAME) {
                each(&super::netlink::string(name), attrs);
            }
        },
    )
}

/// Every link's name and MTU.
fn rtnl_mtus() -> Option<Vec<LinkConf>> {
    const IFLA_MTU: u16 = 4;
    let mut out = Vec::new();
    each_link(&mut |dev, attrs| {
        if let Some(mtu) = super::netlink::attr(attrs, IFLA_MTU).and_then(super::netlink::ne32) {
            out.push(LinkConf {
                dev: dev.to_string(),
                mtu,
                forwarding_v4: None,
                forwarding_v6: None,
                rp_filter: None,
            });
        }
    })?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This namespace's loopback is listed with its MTU and sysctls.
    #[test]
    fn own_links_have_mtus() {
        let links = links_in(None);
        let lo = links
            .iter()
            .find(|l| l.dev == "lo")
            .unwrap_or_else(|| panic!("no lo in {links:?}"));
        assert_eq!(lo.mtu, 65536);
        assert!(lo.forwarding_v4.is_some(), "{lo:?}");
    }
}
