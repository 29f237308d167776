//! TCP listeners and UDP sockets of a namespace by sock_diag (what `ss
//! -lnume` reads), with what /proc/net/{tcp,udp} does not show: a
//! listener's effective backlog (its tx_queue column is write_seq -
//! snd_una, 0 for a listener, not the backlog), each socket's drops
//! (SK_MEMINFO_DROPS) and its cgroup, which names the pod that owns it.
//! Complements [`super::sockets`].

use std::{net::IpAddr, path::Path};

use serde::{Deserialize, Serialize};

use super::netlink::{NLMSG_HDRLEN, attr, dump, ne32};

/// SOCK_DIAG_BY_FAMILY (include/uapi/linux/sock_diag.h): the request and
/// reply type of inet_diag dumps.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// INET_DIAG_SKMEMINFO and INET_DIAG_CGROUP_ID (enum in
/// include/uapi/linux/inet_diag.h).
const INET_DIAG_SKMEMINFO: u16 = 7;
const INET_DIAG_CGROUP_ID: u16 = 21;
/// SK_MEMINFO_DROPS (enum in include/uapi/linux/sock_diag.h): the index of
/// sk_drops in INET_DIAG_SKMEMINFO's u32 array.
const SK_MEMINFO_DROPS: usize = 8;
/// TCP_LISTEN (include/net/tcp_states.h).
const TCP_LISTEN: u8 = 10;
/// sizeof(struct inet_diag_req_v2): sdiag_family, sdiag_protocol,
/// idiag_ext, pad (u8 each), idiag_states (u32), id (struct
/// inet_diag_sockid, 48 bytes).
const REQ_V2_LEN: usize = 56;
/// sizeof(struct inet_diag_msg): family, state, timer, retrans (u8 each),
/// id (struct inet_diag_sockid at 4: sport be16 at 4, dport be16 at 6,
/// src be32[4] at 8, dst be32[4] at 24, if, cookie u32[2]), then expires
/// at 52, rqueue at 56, wqueue at 60, uid at 64, inode at 68.
const DIAG_MSG_LEN: usize = 72;
const MSG_SPORT: usize = 4;
const MSG_DPORT: usize = 6;
const MSG_SRC: usize = 8;
const MSG_RQUEUE: usize = 56;
const MSG_WQUEUE: usize = 60;
const MSG_UID: usize = 64;
const MSG_INODE: usize = 68;

/// One TCP listener or UDP socket: a SOCK_DIAG_BY_FAMILY reply (struct
/// inet_diag_msg and INET_DIAG_* attributes; inet_sk_diag_fill() in
/// net/ipv4/inet_diag.c).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DiagSocket {
    /// `tcp` or `udp`.
    pub proto: String,
    /// Its local address (id.idiag_src), unspecified when bound to any.
    pub addr: IpAddr,
    /// Its local port (id.idiag_sport).
    pub port: u16,
    /// TCP: in LISTEN; UDP: unconnected (no peer port, id.idiag_dport 0),
    /// so it receives from any peer.
    pub listening: bool,
    /// idiag_rqueue. A TCP listener: connections waiting to be accepted
    /// (sk_ack_backlog, tcp_diag_get_info()); UDP: bytes in the receive
    /// queue.
    pub rx_queue: u32,
    /// A TCP listener's effective backlog (sk_max_ack_backlog, which
    /// tcp_diag_get_info() puts in idiag_wqueue: listen()'s backlog capped
    /// by net.core.somaxconn); new connections are dropped once
    /// `rx_queue` exceeds it. 0 for UDP.
    pub max_backlog: u32,
    /// Packets the socket dropped (sk_drops, SK_MEMINFO_DROPS of
    /// INET_DIAG_SKMEMINFO): a full receive buffer, a filter...
    pub drops: u32,
    /// idiag_uid: its owner.
    pub uid: u32,
    /// idiag_inode: the inode of `socket:[N]` in /proc/PID/fd.
    pub inode: u32,
    /// INET_DIAG_CGROUP_ID: the cgroup v2 id of its creator, the inode of
    /// its cgroup directory (sent by inet_diag_msg_attrs_fill() since 5.7,
    /// with CONFIG_SOCK_CGROUP_DATA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<u64>,
}

/// The TCP listeners and UDP sockets (IPv4 and IPv6) of the namespace at
/// `path` (entered on this thread), or of this thread's namespace when
/// None: one SOCK_DIAG_BY_FAMILY dump per family and protocol on
/// NETLINK_SOCK_DIAG. A dump the kernel refuses (no IPv6, no udp_diag) is
/// skipped; None when the namespace cannot be entered or every dump
/// fails.
pub fn sockets_in(path: Option<&Path>) -> Option<Vec<DiagSocket>> {
    let _g = match path.map(crate::node::netns::NetnsGuard::enter) {
        Some(Ok(g)) => Some(g),
        Some(Err(_)) => return None,
        None => None,
    };
    let mut out = Vec::new();
    let mut answered = false;
    for family in [libc::AF_INET, libc::AF_INET6] {
        for (proto, states) in [
            (libc::IPPROTO_TCP, 1u32 << TCP_LISTEN),
            (libc::IPPROTO_UDP, u32::MAX),
        ] {
            let req = request(family as u8, proto as u8, states);
            let ok = dump(
                libc::NETLINK_SOCK_DIAG,
                SOCK_DIAG_BY_FAMILY,
                &req,
                &mut |ty, msg| {
                    if ty == SOCK_DIAG_BY_FAMILY
                        && let Some(s) = parse(msg, proto == libc::IPPROTO_TCP)
                    {
                        out.push(s);
                    }
                },
            );
            answered |= ok.is_some();
        }
    }
    answered.then_some(out)
}

/// A struct inet_diag_req_v2 for the sockets of `family` and `proto` in
/// `states` (a mask of 1 << TCP_*), asking for INET_DIAG_SKMEMINFO
/// (idiag_ext bit 1 << (INET_DIAG_SKMEMINFO - 1)); id left zero: every
/// socket.
fn request(family: u8, proto: u8, states: u32) -> [u8; REQ_V2_LEN] {
    let mut r = [0u8; REQ_V2_LEN];
    r[0] = family;
    r[1] = proto;
    r[2] = 1 << (INET_DIAG_SKMEMINFO - 1);
    r[4..8].copy_from_slice(&states.to_ne_bytes());
    r
}

/// A SOCK_DIAG_BY_FAMILY reply, header included, from a dump of TCP
/// (`tcp`) or UDP. None when it is too short or of an unknown family.
fn parse(msg: &[u8], tcp: bool) -> Option<DiagSocket> {
    let m = msg.get(NLMSG_HDRLEN..NLMSG_HDRLEN + DIAG_MSG_LEN)?;
    // idiag_family at 0, idiag_state (TCP_*) at 1.
    let addr = match i32::from(m[0]) {
        libc::AF_INET => IpAddr::from(<[u8; 4]>::try_from(&m[MSG_SRC..MSG_SRC + 4]).ok()?),
        libc::AF_INET6 => IpAddr::from(<[u8; 16]>::try_from(&m[MSG_SRC..MSG_SRC + 16]).ok()?),
        _ => return None,
    };
    let be16 = |at: usize| u16::from_be_bytes([m[at], m[at + 1]]);
    let attrs = &msg[NLMSG_HDRLEN + DIAG_MSG_LEN..];
    let listening = if tcp {
        m[1] == TCP_LISTEN
    } else {
        be16(MSG_DPORT) == 0
    };
    let drops = attr(attrs, INET_DIAG_SKMEMINFO)
        .and_then(|v| v.get(SK_MEMINFO_DROPS * 4..))
        .and_then(ne32)
        .unwrap_or(0);
    let cgroup = attr(attrs, INET_DIAG_CGROUP_ID)
        .and_then(|v| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)));
    Some(DiagSocket {
        proto: if tcp { "tcp" } else { "udp" }.into(),
        addr,
        port: be16(MSG_SPORT),
        listening,
        rx_queue: ne32(&m[MSG_RQUEUE..])?,
        max_backlog: if tcp && listening {
            ne32(&m[MSG_WQUEUE..])?
        } else {
            0
        },
        drops,
        uid: ne32(&m[MSG_UID..])?,
        inode: ne32(&m[MSG_INODE..])?,
        cgroup,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::netlink::put_attr;
    use std::mem::{offset_of, size_of};

    /// include/uapi/linux/inet_diag.h's structs, to check the offsets the
    /// parser uses against the compiler's layout.
    #[repr(C)]
    struct SockId {
        sport: u16,
        dport: u16,
        src: [u32; 4],
        dst: [u32; 4],
        ifindex: u32,
        cookie: [u32; 2],
    }
    #[repr(C)]
    struct ReqV2 {
        family: u8,
        protocol: u8,
        ext: u8,
        pad: u8,
        states: u32,
        id: SockId,
    }
    #[repr(C)]
    struct Msg {
        family: u8,
        state: u8,
        timer: u8,
        retrans: u8,
        id: SockId,
        expires: u32,
        rqueue: u32,
        wqueue: u32,
        uid: u32,
        inode: u32,
    }

    #[test]
    fn layouts_are_the_kernels() {
        assert_eq!(size_of::<SockId>(), 48);
        assert_eq!(size_of::<ReqV2>(), REQ_V2_LEN);
        assert_eq!(offset_of!(ReqV2, states), 4);
        assert_eq!(size_of::<Msg>(), DIAG_MSG_LEN);
        assert_eq!(offset_of!(Msg, id) + offset_of!(SockId, sport), MSG_SPORT);
        assert_eq!(offset_of!(Msg, id) + offset_of!(SockId, dport), MSG_DPORT);
        assert_eq!(offset_of!(Msg, id) + offset_of!(SockId, src), MSG_SRC);
        assert_eq!(offset_of!(Msg, rqueue), MSG_RQUEUE);
        assert_eq!(offset_of!(Msg, wqueue), MSG_WQUEUE);
        assert_eq!(offset_of!(Msg, uid), MSG_UID);
        assert_eq!(offset_of!(Msg, inode), MSG_INODE);
        let r = request(
            libc::AF_INET6 as u8,
            libc::IPPROTO_TCP as u8,
            1 << TCP_LISTEN,
        );
        assert_eq!(&r[..8], &[10, 6, 0x40, 0, 0, 4, 0, 0]);
    }

    /// A reply: header, struct inet_diag_msg, `attrs`.
    fn reply(family: u8, state: u8, src: &[u8], ports: (u16, u16), q: [u32; 4]) -> Vec<u8> {
        let mut m = vec![0u8; NLMSG_HDRLEN + DIAG_MSG_LEN];
        m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        let b = &mut m[NLMSG_HDRLEN..];
        b[0] = family;
        b[1] = state;
        b[MSG_SPORT..MSG_SPORT + 2].copy_from_slice(&ports.0.to_be_bytes());
        b[MSG_DPORT..MSG_DPORT + 2].copy_from_slice(&ports.1.to_be_bytes());
        b[MSG_SRC..MSG_SRC + src.len()].copy_from_slice(src);
        for (i, v) in q.iter().enumerate() {
            let at = MSG_RQUEUE + 4 * i;
            b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        }
        m
    }

    fn meminfo(drops: u32) -> Vec<u8> {
        let mut v = vec![0u8; 4 * 9];
        v[32..36].copy_from_slice(&drops.to_ne_bytes());
        let mut a = Vec::new();
        put_attr(&mut a, INET_DIAG_SKMEMINFO, &v);
        a
    }

    #[test]
    fn reads_a_listener_backlog_and_cgroup() {
        // 10.0.0.5:8080 listening, 3 waiting of 128, uid 1000, inode 77.
        let mut m = reply(
            libc::AF_INET as u8,
            TCP_LISTEN,
            &[10, 0, 0, 5],
            (8080, 0),
            [3, 128, 1000, 77],
        );
        m.extend(meminfo(2));
        put_attr(&mut m, INET_DIAG_CGROUP_ID, &4242u64.to_ne_bytes());
        assert_eq!(
            parse(&m, true),
            Some(DiagSocket {
                proto: "tcp".into(),
                addr: IpAddr::from([10, 0, 0, 5]),
                port: 8080,
                listening: true,
                rx_queue: 3,
                max_backlog: 128,
                drops: 2,
                uid: 1000,
                inode: 77,
                cgroup: Some(4242),
            })
        );
    }

    #[test]
    fn reads_udp_sockets_connected_or_not() {
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        // [::1]:53, 640 bytes queued, wqueue (wmem) not a backlog.
        let mut m = reply(libc::AF_INET6 as u8, 7, &v6, (53, 0), [640, 512, 0, 9]);
        m.extend(meminfo(17));
        let s = parse(&m, false).unwrap();
        assert_eq!(s.addr, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(
            (
                s.proto.as_str(),
                s.port,
                s.listening,
                s.rx_queue,
                s.max_backlog,
                s.drops
            ),
            ("udp", 53, true, 640, 0, 17)
        );
        assert_eq!(s.cgroup, None);
        let c = reply(libc::AF_INET as u8, 1, &[127, 0, 0, 1], (4000, 53), [0; 4]);
        assert!(!parse(&c, false).unwrap().listening);
    }

    #[test]
    fn short_or_unknown_replies_are_skipped() {
        let m = reply(
            libc::AF_INET as u8,
            TCP_LISTEN,
            &[1, 2, 3, 4],
            (1, 0),
            [0; 4],
        );
        for n in 0..m.len() {
            assert!(parse(&m[..n], true).is_none(), "{n}");
        }
        let mut bad = m.clone();
        bad[NLMSG_HDRLEN] = 99;
        assert!(parse(&bad, true).is_none());
        // A short SKMEMINFO or CGROUP_ID is no value, no panic.
        let mut short = m.clone();
        put_attr(&mut short, INET_DIAG_SKMEMINFO, &[0u8; 12]);
        put_attr(&mut short, INET_DIAG_CGROUP_ID, &[1, 2]);
        let s = parse(&short, true).unwrap();
        assert_eq!((s.drops, s.cgroup), (0, None));
    }

    /// The inode of `socket:[N]`, the link of fd `fd` in /proc/self/fd.
    fn fd_inode(fd: i32) -> u32 {
        let l = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        let l = l.to_string_lossy();
        l.trim_start_matches("socket:[")
            .trim_end_matches(']')
            .parse()
            .unwrap_or_else(|_| panic!("{l}"))
    }

    /// The inode of this process's cgroup v2 directory: its `0::/PATH`
    /// line of /proc/self/cgroup under the cgroup2 mount of
    /// /proc/self/mounts.
    fn own_cgroup_inode() -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let rel = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
        let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
        let root = mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| f[1].to_string())
        })?;
        let dir = format!("{root}{}", rel.trim_end_matches('/'));
        std::fs::metadata(dir).ok().map(|m| m.ino())
    }

    /// A listener with one connection waiting and a UDP socket that
    /// dropped datagrams, both made in a namespace of the test's own,
    /// found by port with their backlog, drops, inode and cgroup.
    #[test]
    fn finds_its_own_listener_and_udp_socket() {
        use std::{
            net::{TcpListener, TcpStream, UdpSocket},
            os::fd::AsRawFd,
        };
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("!!!!! SKIPPED finds_its_own_listener_and_udp_socket: not root !!!!!");
            return;
        }
        let ns = crate::node::netns::TestNetns::add("tracer-diag");
        let path = crate::node::netns::named_dir().join(&ns.0);
        assert!(ns.run(&["ip", "link", "set", "lo", "up"]));
        let (listener, _client, udp, somaxconn) = {
            let _g = crate::node::netns::NetnsGuard::enter(&path).unwrap();
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let u = UdpSocket::bind("127.0.0.1:0").unwrap();
            // The smallest receive buffer, then more than it holds.
            let zero = 0i32;
            // SAFETY: setsockopt with an int of its size on an fd `u` owns.
            unsafe {
                libc::setsockopt(
                    u.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    std::ptr::from_ref(&zero).cast(),
                    size_of::<i32>() as u32,
                );
            }
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            for _ in 0..50 {
                let _ = tx.send_to(&[0u8; 1000], u.local_addr().unwrap());
            }
            // /proc/sys/net shows the reading thread's namespace.
            let max: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            (l, c, u, max)
        };
        let tcp_port = listener.local_addr().unwrap().port();
        let udp_port = udp.local_addr().unwrap().port();
        let find = |proto: &str, port: u16| -> Option<DiagSocket> {
            sockets_in(Some(&path))?
                .into_iter()
                .find(|s| s.proto == proto && s.port == port)
        };
        let Some(mut l) = find("tcp", tcp_port) else {
            eprintln!(
                "!!!!! SKIPPED finds_its_own_listener_and_udp_socket: the kernel refused \
                 the sock_diag dumps or listed no listener !!!!!"
            );
            return;
        };
        // The handshake's last ACK may still be on its way to the
        // listener.
        for _ in 0..100 {
            if l.rx_queue == 1 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            l = find("tcp", tcp_port).unwrap();
        }
        assert!(l.listening, "{l:?}");
        assert_eq!(l.addr, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(l.rx_queue, 1, "{l:?}");
        // std listens with a backlog of 128; the kernel caps it at
        // somaxconn (__sys_listen()).
        assert_eq!(l.max_backlog, 128.min(somaxconn), "{l:?}");
        assert_eq!(l.inode, fd_inode(listener.as_raw_fd()));
        assert_eq!(l.uid, unsafe { libc::geteuid() });
        // listen() again on a listener only changes its backlog.
        // SAFETY: listen(2) on an fd `listener` owns.
        assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 7) }, 0);
        assert_eq!(find("tcp", tcp_port).unwrap().max_backlog, 7.min(somaxconn));
        let u = find("udp", udp_port).expect("the UDP socket");
        assert!(u.listening && u.max_backlog == 0, "{u:?}");
        assert!(u.drops > 0 && u.rx_queue > 0, "{u:?}");
        assert_eq!(u.inode, fd_inode(udp.as_raw_fd()));
        match (l.cgroup, own_cgroup_inode()) {
            (Some(c), Some(own)) => assert_eq!(c, own, "{l:?}"),
            (c, own) => eprintln!(
                "!!!!! SKIPPED the cgroup part of finds_its_own_listener_and_udp_socket: \
                 socket's {c:?}, own {own:?} !!!!!"
            ),
        }
        eprintln!("{l:?}\n{u:?}");
        assert!(sockets_in(None).is_some());
        assert!(sockets_in(Some(Path::new("/nonexistent"))).is_none());
    }
}
