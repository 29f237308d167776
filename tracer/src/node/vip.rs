//! Who owns the followed address: which namespaces hold it on which device,
//! how often that changed while tracing, and which link-layer addresses
//! answered for it. Two controllers fighting over a LoadBalancer IP
//! (incident 1) show up as owner changes and several MACs.

use std::{
    collections::BTreeSet,
    net::IpAddr,
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    path::PathBuf,
};

use serde::{Deserialize, Serialize};

use crate::node::{
    netlink::{drain, subscribe},
    netns::{NetnsGuard, addresses_in},
};

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

/// One watched namespace: its address-change subscription (None when
/// that failed: then it is read on every poll) and who owns the target
/// there.
#[derive(Debug)]
struct Watched {
    label: String,
    path: PathBuf,
    sub: Option<OwnedFd>,
    owners: BTreeSet<Owner>,
}

/// The owners of the followed address in the watched namespaces, kept by
/// rtnetlink notifications: each namespace's socket subscribed to
/// RTNLGRP_IPV4_IFADDR and RTNLGRP_IPV6_IFADDR, all in one epoll set the
/// event loop waits on ([`VipWatch::fd`]); a namespace is read again only
/// when it said its addresses changed (or its socket overflowed).
#[derive(Debug, Default)]
pub struct VipWatch {
    watched: Vec<Watched>,
    owners: BTreeSet<Owner>,
    pub changes: Vec<OwnerChange>,
    /// Link-layer addresses that answered for the target (neighbour updates).
    pub macs: BTreeSet<(IpAddr, String)>,
    /// The epoll set of the subscriptions; its data is the index in
    /// `watched`.
    epoll: Option<OwnedFd>,
}

/// RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR (include/uapi/linux/rtnetlink.h).
const ADDR_GROUPS: [u32; 2] = [5, 9];

impl VipWatch {
    pub fn new(watched: Vec<(String, PathBuf)>) -> VipWatch {
        VipWatch {
            watched: watched
                .into_iter()
                .map(|(label, path)| Watched {
                    label,
                    path,
                    sub: None,
                    owners: BTreeSet::new(),
                })
                .collect(),
            ..Default::default()
        }
    }

    /// The followed address's owners in one namespace, read now.
    fn read(w: &Watched, followed: &dyn Fn(IpAddr) -> bool) -> BTreeSet<Owner> {
        addresses_in(&w.path)
            .unwrap_or_default()
            .into_iter()
            .filter(|a| followed(a.addr))
            .map(|a| (w.label.clone(), a.dev, a.addr))
            .collect()
    }

    /// First look: who owns it when tracing starts (not a change). Each
    /// namespace is subscribed to before it is read, so no change falls
    /// between the two.
    pub fn start(&mut self, followed: &dyn Fn(IpAddr) -> bool) {
        // SAFETY: plain epoll_create1(2); the fd is owned below.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        // SAFETY: a new fd nothing else owns.
        self.epoll = (ep >= 0).then(|| unsafe { OwnedFd::from_raw_fd(ep) });
        for (i, w) in self.watched.iter_mut().enumerate() {
            w.sub = NetnsGuard::enter(&w.path)
                .ok()
                .and_then(|_in| subscribe(libc::NETLINK_ROUTE, &ADDR_GROUPS));
            if let (Some(ep), Some(sub)) = (&self.epoll, &w.sub) {
                let mut ev = libc::epoll_event {
                    events: libc::EPOLLIN as u32,
                    u64: i as u64,
                };
                // SAFETY: adding an fd we own to an epoll set we own.
                let r = unsafe {
                    libc::epoll_ctl(
                        ep.as_raw_fd(),
                        libc::EPOLL_CTL_ADD,
                        sub.as_raw_fd(),
                        &raw mut ev,
                    )
                };
                if r != 0 {
                    // Not in the set: read on every poll instead.
                    w.sub = None;
                }
            }
            w.owners = Self::read(w, followed);
        }
        if self.epoll.is_none() {
            for w in &mut self.watched {
                w.sub = None;
            }
        }
        self.owners = self.current();
    }

    fn current(&self) -> BTreeSet<Owner> {
        self.watched
            .iter()
            .flat_map(|w| w.owners.iter().cloned())
            .collect()
    }

    /// The epoll set that is readable when a watched namespace's addresses
    /// changed: the event loop waits on it and then calls [`VipWatch::poll`].
    /// None when there is none (then only the periodic poll looks).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.epoll.as_ref().map(AsFd::as_fd)
    }

    /// Read the namespaces whose addresses changed since the last poll (and
    /// those without a subscription), and record what was added or
    /// removed.
    pub fn poll(&mut self, followed: &dyn Fn(IpAddr) -> bool, t_ms: u64) {
        let mut dirty: BTreeSet<usize> = self
            .watched
            .iter()
            .enumerate()
            .filter(|(_, w)| w.sub.is_none())
            .map(|(i, _)| i)
            .collect();
        if let Some(ep) = self.epoll.as_ref().map(AsRawFd::as_raw_fd) {
            let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
            loop {
                // SAFETY: epoll_wait into a buffer we own, of its length,
                // without waiting.
                let n =
                    unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 0) };
                if n <= 0 {
                    break;
                }
                for e in &events[..n as usize] {
                    let i = e.u64 as usize;
                    let Some(sub) = self.watched.get(i).and_then(|w| w.sub.as_ref()) else {
                        continue;
                    };
                    // Each change in the order the kernel sent it: a loop
                    // that comes late still sees an address added and
                    // removed again in between (incident 1's flapping VIP).
                    let mut msgs = Vec::new();
                    let whole = drain(sub, &mut |ty, msg| msgs.push((ty, msg.to_vec())));
                    let mut unnamed = false;
                    for (ty, msg) in msgs {
                        unnamed |= self.apply(i, ty, &msg, followed, t_ms);
                    }
                    // Lost notifications, or a change without its device's
                    // name (IPv6): read afresh.
                    if !whole || unnamed {
                        dirty.insert(i);
                    }
                }
                if (n as usize) < events.len() {
                    break;
                }
            }
        }
        if dirty.is_empty() {
            return;
        }
        for i in dirty {
            let w = &self.watched[i];
            let owners = Self::read(w, followed);
            self.watched[i].owners = owners;
        }
        let now = self.current();
        self.changes.extend(diff(&self.owners, &now, t_ms));
        self.owners = now;
    }

    /// Apply one address notification of namespace `i` to its owners,
    /// recording the change; true when it concerns the followed address
    /// but names no device (then the namespace is read instead).
    fn apply(
        &mut self,
        i: usize,
        ty: u16,
        msg: &[u8],
        followed: &dyn Fn(IpAddr) -> bool,
        t_ms: u64,
    ) -> bool {
        let added = match ty {
            libc::RTM_NEWADDR => true,
            libc::RTM_DELADDR => false,
            _ => return false,
        };
        let Some(a) = crate::node::netns::parse_ifaddr(msg).filter(|a| followed(a.addr)) else {
            return false;
        };
        let Some(dev) = a.label else {
            return true;
        };
        let owner = (self.watched[i].label.clone(), dev, a.addr);
        if added {
            self.watched[i].owners.insert(owner);
        } else {
            self.watched[i].owners.remove(&owner);
        }
        let now = self.current();
        self.changes.extend(diff(&self.owners, &now, t_ms));
        self.owners = now;
        false
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

    /// An RTM_NEWADDR or RTM_DELADDR notification of 10.0.0.9/32 on
    /// `dev` (nlmsghdr, ifaddrmsg, IFA_LOCAL, IFA_LABEL).
    fn notification(ty: u16, dev: &str) -> Vec<u8> {
        let mut attrs = Vec::new();
        crate::node::netlink::put_attr(&mut attrs, 2, &[10, 0, 0, 9]);
        let mut label = dev.as_bytes().to_vec();
        label.push(0);
        crate::node::netlink::put_attr(&mut attrs, 3, &label);
        let mut m = vec![0u8; 16];
        m.extend([libc::AF_INET as u8, 32, 0, 0]);
        m.extend(2u32.to_ne_bytes());
        m.extend(attrs);
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m[4..6].copy_from_slice(&ty.to_ne_bytes());
        m
    }

    /// Notifications read late, after the address came and went again,
    /// still give both changes, in order (what re-reading the namespace
    /// would have lost).
    #[test]
    fn an_address_added_and_removed_before_the_poll_is_two_changes() {
        let mut w = VipWatch::new(vec![("node1".into(), PathBuf::from("/nonexistent"))]);
        let vip: IpAddr = "10.0.0.9".parse().unwrap();
        let followed = |a: IpAddr| a == vip;
        assert!(!w.apply(
            0,
            libc::RTM_NEWADDR,
            &notification(libc::RTM_NEWADDR, "eth0"),
            &followed,
            5
        ));
        assert!(!w.apply(
            0,
            libc::RTM_DELADDR,
            &notification(libc::RTM_DELADDR, "eth0"),
            &followed,
            5
        ));
        let events: Vec<OwnerEvent> = w.changes.iter().map(|c| c.event).collect();
        assert_eq!(events, [OwnerEvent::Added, OwnerEvent::Removed]);
        assert!(w.owners.is_empty());
        // Another address is not followed.
        let other = |a: IpAddr| a != vip;
        assert!(!w.apply(
            0,
            libc::RTM_NEWADDR,
            &notification(libc::RTM_NEWADDR, "eth0"),
            &other,
            6
        ));
        assert_eq!(w.changes.len(), 2);
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

#[cfg(test)]
mod netns_tests {
    use std::process::Command;

    use super::*;

    /// Wait up to 2 s for the epoll set to be readable.
    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one pollfd we own.
        unsafe { libc::poll(&raw mut p, 1, 2000) == 1 }
    }

    /// In a fresh namespace: adding and removing the followed address is
    /// told by a notification (the set becomes readable) and recorded by
    /// the next poll; with nothing changed the set stays quiet. Needs root.
    #[test]
    fn owner_changes_come_from_notifications() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED owner_changes_come_from_notifications: not root");
            return;
        }
        let ns = crate::node::netns::TestNetns::add("tracer-vip");
        let ip = |args: &[&str]| {
            assert!(
                Command::new("ip")
                    .args(["-n", &ns.0])
                    .args(args)
                    .status()
                    .unwrap()
                    .success(),
                "ip {args:?}"
            );
        };
        ip(&[
            "link", "add", "vip0", "type", "veth", "peer", "name", "vip1",
        ]);
        ip(&["link", "set", "vip0", "up"]);
        let vip: IpAddr = "10.99.0.1".parse().unwrap();
        let followed = |a: IpAddr| a == vip;
        let mut w = VipWatch::new(vec![("v".into(), format!("/run/netns/{}", ns.0).into())]);
        w.start(&followed);
        assert!(w.owners().is_empty());
        let fd = w.fd().expect("an epoll set").try_clone_to_owned().unwrap();
        ip(&["addr", "add", "10.99.0.1/32", "dev", "vip0"]);
        assert!(readable(fd.as_fd()), "no notification of the new address");
        w.poll(&followed, 10);
        assert_eq!(w.owners(), vec!["10.99.0.1 on vip0 in netns v".to_string()]);
        assert_eq!(w.changes.len(), 1);
        assert_eq!(w.changes[0].event, OwnerEvent::Added);
        // Drained: quiet until the next change.
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one pollfd we own, without waiting.
        assert_eq!(unsafe { libc::poll(&raw mut p, 1, 0) }, 0);
        ip(&["addr", "del", "10.99.0.1/32", "dev", "vip0"]);
        assert!(readable(fd.as_fd()), "no notification of the removal");
        w.poll(&followed, 20);
        assert_eq!(w.changes.len(), 2);
        assert_eq!(
            (w.changes[1].event, w.changes[1].t_ms),
            (OwnerEvent::Removed, 20)
        );
        drop(ns);
    }
}
