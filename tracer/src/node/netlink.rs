//! Netlink on sockets of our own, in this thread's namespace: one dump
//! (the request, then every reply message until NLMSG_DONE), one request
//! answered by an ack, a socket subscribed to multicast groups, and the
//! attribute walk every reader of the messages uses (addresses, tc
//! filters, nf_tables tables and rules).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// struct nlmsghdr (include/uapi/linux/netlink.h).
pub const NLMSG_HDRLEN: usize = 16;

/// A new netlink socket of `protocol` (NETLINK_ROUTE, NETLINK_NETFILTER)
/// in this thread's namespace.
fn socket(protocol: i32, flags: i32) -> Option<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned below.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | flags,
            protocol,
        )
    };
    // SAFETY: a new fd nothing else owns.
    (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Send one message of `msg_type` with `flags` and `body` after its header.
fn send(sock: &OwnedFd, msg_type: u16, flags: u16, body: &[u8]) -> Option<()> {
    let len = NLMSG_HDRLEN + body.len();
    let mut req = vec![0u8; len];
    req[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&msg_type.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16 | flags).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[NLMSG_HDRLEN..].copy_from_slice(body);
    // SAFETY: sending a buffer we own, of its length.
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    (sent == req.len() as isize).then_some(())
}

/// What one received datagram ended with.
enum Batch {
    /// More messages are to come.
    More,
    Done,
    /// An error reply with this (negative) errno.
    Error(i32),
}

/// Walk the messages of one datagram: each data message to `each`, acks
/// skipped. None for a malformed message.
fn walk(mut msgs: &[u8], each: &mut dyn FnMut(u16, &[u8])) -> Option<Batch> {
    while msgs.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes(msgs[0..4].try_into().ok()?) as usize;
        let ty = u16::from_ne_bytes(msgs[4..6].try_into().ok()?);
        if len < NLMSG_HDRLEN || len > msgs.len() {
            return None;
        }
        match ty {
            t if t == libc::NLMSG_DONE as u16 => return Some(Batch::Done),
            t if t == libc::NLMSG_ERROR as u16 => {
                let err = i32::from_ne_bytes(msgs.get(16..20)?.try_into().ok()?);
                if err != 0 {
                    return Some(Batch::Error(err));
                }
                return Some(Batch::Done);
            }
            t => each(t, &msgs[..len]),
        }
        // Messages are 4-byte aligned (NLMSG_ALIGN).
        msgs = msgs.get((len + 3) & !3..).unwrap_or(&[]);
    }
    Some(Batch::More)
}

/// Receive until NLMSG_DONE or an ack/error: Ok, or the errno of an error
/// reply (or EIO for a failed receive or a malformed message).
fn receive(sock: &OwnedFd, each: &mut dyn FnMut(u16, &[u8])) -> Result<(), i32> {
    receive_into(sock, &mut vec![0u8; RECV_BUF], each)
}

/// The receive buffer: the kernel fills a dump's datagrams up to the
/// largest buffer a recvmsg(2) offered, capped at 32 KiB
/// (netlink_recvmsg(), max_recvmsg_len), so twice that is never short.
const RECV_BUF: usize = 64 * 1024;

/// `receive`, into `buf`.
fn receive_into(
    sock: &OwnedFd,
    buf: &mut [u8],
    each: &mut dyn FnMut(u16, &[u8]),
) -> Result<(), i32> {
    loop {
        // SAFETY: receiving into a buffer we own, of its length.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            return Err(libc::EIO);
        }
        match walk(&buf[..n as usize], each) {
            Some(Batch::More) => {}
            Some(Batch::Done) => return Ok(()),
            Some(Batch::Error(e)) => return Err(-e),
            None => return Err(libc::EIO),
        }
    }
}

/// Send a dump request of `msg_type` with `body` after its header on a new
/// `protocol` socket (NETLINK_ROUTE, NETLINK_NETFILTER) and hand each
/// reply message, header included, to `each` with its type. None on any
/// error (a failed socket, send or receive, a malformed message, an error
/// reply); an ack (error 0) is skipped.
pub fn dump(
    protocol: i32,
    msg_type: u16,
    body: &[u8],
    each: &mut dyn FnMut(u16, &[u8]),
) -> Option<()> {
    Dumps::new(protocol)?.dump(msg_type, body, each)
}

/// One socket and buffer for many dumps in a row (nf_tables rules chain by
/// chain): a socket runs one dump at a time, and the next may start once
/// the last has sent NLMSG_DONE.
pub struct Dumps {
    sock: OwnedFd,
    buf: Vec<u8>,
}

impl Dumps {
    /// A `protocol` socket of this thread's namespace.
    pub fn new(protocol: i32) -> Option<Self> {
        Some(Self {
            sock: socket(protocol, 0)?,
            buf: vec![0u8; RECV_BUF],
        })
    }

    /// One dump, as [`dump`].
    pub fn dump(
        &mut self,
        msg_type: u16,
        body: &[u8],
        each: &mut dyn FnMut(u16, &[u8]),
    ) -> Option<()> {
        send(&self.sock, msg_type, libc::NLM_F_DUMP as u16, body)?;
        receive_into(&self.sock, &mut self.buf, each).ok()
    }
}

/// Send one request (a delete, say) and wait for its ack: Ok, or the
/// errno the kernel answered with.
pub fn request(protocol: i32, msg_type: u16, body: &[u8]) -> Result<(), i32> {
    let sock = socket(protocol, 0).ok_or(libc::EIO)?;
    send(&sock, msg_type, libc::NLM_F_ACK as u16, body).ok_or(libc::EIO)?;
    receive(&sock, &mut |_, _| {})
}

/// Send one request that the kernel answers with messages and an ack
/// (RTM_GETROUTE of one destination, `ip route get`): each reply message,
/// header included, to `each`; Ok, or the errno the kernel answered with.
pub fn query(
    protocol: i32,
    msg_type: u16,
    body: &[u8],
    each: &mut dyn FnMut(u16, &[u8]),
) -> Result<(), i32> {
    let sock = socket(protocol, 0).ok_or(libc::EIO)?;
    send(&sock, msg_type, libc::NLM_F_ACK as u16, body).ok_or(libc::EIO)?;
    receive(&sock, each)
}

/// A non-blocking `protocol` socket (NETLINK_ROUTE, NETLINK_NETFILTER)
/// of this thread's namespace, subscribed to the multicast `groups`
/// (RTNLGRP_* or NFNLGRP_* numbers).
pub fn subscribe(protocol: i32, groups: &[u32]) -> Option<OwnedFd> {
    let sock = socket(protocol, libc::SOCK_NONBLOCK)?;
    // Bound (the kernel picks the port id): an unbound socket's port id is
    // 0, the kernel's own, and multicast from the kernel skips it.
    // SAFETY: an all-zero sockaddr_nl is valid.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: bind(2) with a sockaddr_nl of its size.
    let r = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            std::ptr::from_ref(&addr).cast(),
            size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if r != 0 {
        return None;
    }
    for g in groups {
        // SAFETY: setsockopt with a u32 of its size.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_NETLINK,
                libc::NETLINK_ADD_MEMBERSHIP,
                std::ptr::from_ref(g).cast(),
                size_of::<u32>() as u32,
            )
        };
        if r != 0 {
            return None;
        }
    }
    Some(sock)
}

/// Read every notification waiting on a non-blocking `sock`, each message
/// to `each`. False when the socket overflowed (ENOBUFS: notifications
/// were lost) or failed: the caller must read the state afresh.
pub fn drain(sock: &OwnedFd, each: &mut dyn FnMut(u16, &[u8])) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: receiving into a buffer we own, of its length.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN);
        }
        if n == 0 || walk(&buf[..n as usize], each).is_none() {
            return false;
        }
    }
}

/// A NETLINK_NETFILTER socket of this thread's namespace, kept to send
/// nf_tables batches on (an owned table lives as long as it).
pub fn netfilter_socket() -> Option<OwnedFd> {
    let sock = socket(libc::NETLINK_NETFILTER, 0)?;
    // A batch is answered at once; a kernel that never answers must not
    // hang the caller.
    let tv = libc::timeval {
        tv_sec: 2,
        tv_usec: 0,
    };
    // SAFETY: setsockopt with a timeval of its size.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::from_ref(&tv).cast(),
            size_of::<libc::timeval>() as u32,
        );
    }
    Some(sock)
}

/// nfnetlink's batch delimiters (NFNL_MSG_BATCH_BEGIN/END), for the
/// nf_tables subsystem.
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNL_SUBSYS_NFTABLES: u16 = 10;

/// One message: header (with NLM_F_REQUEST and `flags`), then `body`.
fn message(out: &mut Vec<u8>, msg_type: u16, flags: u16, seq: u32, body: &[u8]) {
    let len = NLMSG_HDRLEN + body.len();
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&msg_type.to_ne_bytes());
    out.extend_from_slice(&(libc::NLM_F_REQUEST as u16 | flags).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(body);
    out.resize((out.len() + 3) & !3, 0);
}

/// Send nf_tables messages `(type, flags, body)` as one transaction
/// (nfnetlink_rcv_batch(): all or none), each asking for an ack, and wait
/// for every ack: Ok, or the first errno the kernel answered with.
pub fn nft_batch(sock: &OwnedFd, msgs: &[(u16, u16, Vec<u8>)]) -> Result<(), i32> {
    // nfgenmsg: AF_UNSPEC, version 0, res_id = the subsystem (big endian).
    let mut delim = vec![libc::AF_UNSPEC as u8, 0];
    delim.extend_from_slice(&NFNL_SUBSYS_NFTABLES.to_be_bytes());
    let mut req = Vec::new();
    message(&mut req, NFNL_MSG_BATCH_BEGIN, 0, 0, &delim);
    for (i, (ty, flags, body)) in msgs.iter().enumerate() {
        message(
            &mut req,
            *ty,
            flags | libc::NLM_F_ACK as u16,
            i as u32 + 1,
            body,
        );
    }
    message(
        &mut req,
        NFNL_MSG_BATCH_END,
        0,
        msgs.len() as u32 + 1,
        &delim,
    );
    // SAFETY: sending a buffer we own, of its length.
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent != req.len() as isize {
        return Err(libc::EIO);
    }
    let mut acks = 0;
    let mut buf = vec![0u8; 16 * 1024];
    while acks < msgs.len() {
        // SAFETY: receiving into a buffer we own, of its length.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            return Err(libc::EIO);
        }
        let mut m = &buf[..n as usize];
        while m.len() >= NLMSG_HDRLEN {
            let len = ne32(m).unwrap_or(0) as usize;
            if len < NLMSG_HDRLEN || len > m.len() {
                return Err(libc::EIO);
            }
            if u16::from_ne_bytes([m[4], m[5]]) == libc::NLMSG_ERROR as u16 {
                let err = m
                    .get(16..20)
                    .and_then(ne32)
                    .map_or(-libc::EIO, |e| e as i32);
                if err != 0 {
                    return Err(-err);
                }
                acks += 1;
            }
            m = m.get((len + 3) & !3..).unwrap_or(&[]);
        }
    }
    Ok(())
}

/// The attributes (struct nlattr) in `buf`: (type without its flag bits,
/// payload). The walk stops at the first malformed one.
pub fn attrs(buf: &[u8]) -> Attrs<'_> {
    Attrs(buf)
}

pub struct Attrs<'a>(&'a [u8]);

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<(u16, &'a [u8])> {
        let b = self.0;
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        // NLA_F_NESTED and NLA_F_NET_BYTEORDER.
        let ty = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            self.0 = &[];
            return None;
        }
        self.0 = b.get((len + 3) & !3..).unwrap_or(&[]);
        Some((ty, &b[4..len]))
    }
}

/// The first attribute of type `ty` in `buf`.
pub fn attr(buf: &[u8], ty: u16) -> Option<&[u8]> {
    attrs(buf).find(|(t, _)| *t == ty).map(|(_, d)| d)
}

/// A NUL-terminated string attribute.
pub fn string(data: &[u8]) -> String {
    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    String::from_utf8_lossy(&data[..end]).into_owned()
}

pub fn be32(data: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(..4)?.try_into().ok()?))
}

pub fn be64(data: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(data.get(..8)?.try_into().ok()?))
}

pub fn ne32(data: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(data.get(..4)?.try_into().ok()?))
}

/// One attribute, header and padding included, for building requests.
pub fn put_attr(out: &mut Vec<u8>, ty: u16, data: &[u8]) {
    let len = 4 + data.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(data);
    out.resize((out.len() + 3) & !3, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_and_stop_at_malformed() {
        let mut b = Vec::new();
        put_attr(&mut b, 1, b"bpf\0");
        put_attr(&mut b, 2 | 0x8000, &[1, 2, 3]);
        let v: Vec<(u16, &[u8])> = attrs(&b).collect();
        assert_eq!(v, vec![(1, &b"bpf\0"[..]), (2, &[1, 2, 3][..])]);
        assert_eq!(string(attr(&b, 1).unwrap()), "bpf");
        // A length past the buffer ends the walk; so does one below 4.
        let mut bad = b.clone();
        bad[0] = 200;
        assert_eq!(attrs(&bad).count(), 0);
        bad[0] = 2;
        assert_eq!(attrs(&bad).count(), 0);
        assert_eq!(attrs(&b[..6]).count(), 0);
        assert!(be32(&[1, 2]).is_none());
    }

    #[test]
    fn malformed_messages_are_refused() {
        // A header claiming more bytes than the datagram has.
        let mut m = vec![0u8; 16];
        m[0..4].copy_from_slice(&64u32.to_ne_bytes());
        assert!(walk(&m, &mut |_, _| {}).is_none());
        // An error reply carries its errno.
        let mut e = vec![0u8; 20];
        e[0..4].copy_from_slice(&20u32.to_ne_bytes());
        e[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        e[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert!(matches!(walk(&e, &mut |_, _| {}), Some(Batch::Error(x)) if x == -libc::ENOENT));
    }
}
