//! One netlink dump on a socket of its own, in this thread's namespace:
//! the request, then every reply message until NLMSG_DONE. What the node
//! facts read this way (addresses, nf_tables tables) parse the messages.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// struct nlmsghdr (include/uapi/linux/netlink.h).
const NLMSG_HDRLEN: usize = 16;

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
    // SAFETY: plain socket(2); the fd is owned below.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            protocol,
        )
    };
    if raw < 0 {
        return None;
    }
    // SAFETY: a new fd nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let len = NLMSG_HDRLEN + body.len();
    let mut req = vec![0u8; len];
    req[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&msg_type.to_ne_bytes());
    req[6..8].copy_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[NLMSG_HDRLEN..].copy_from_slice(body);
    // SAFETY: sending a buffer we own, of its length.
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent != req.len() as isize {
        return None;
    }
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: receiving into a buffer we own, of its length.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            return None;
        }
        let mut msgs = &buf[..n as usize];
        while msgs.len() >= NLMSG_HDRLEN {
            let len = u32::from_ne_bytes(msgs[0..4].try_into().ok()?) as usize;
            let ty = u16::from_ne_bytes(msgs[4..6].try_into().ok()?);
            if len < NLMSG_HDRLEN || len > msgs.len() {
                return None;
            }
            match ty {
                t if t == libc::NLMSG_DONE as u16 => return Some(()),
                t if t == libc::NLMSG_ERROR as u16 => {
                    let err = i32::from_ne_bytes(msgs.get(16..20)?.try_into().ok()?);
                    if err != 0 {
                        return None;
                    }
                }
                t => each(t, &msgs[..len]),
            }
            // Messages are 4-byte aligned (NLMSG_ALIGN).
            msgs = msgs.get((len + 3) & !3..).unwrap_or(&[]);
        }
    }
}

/// The attributes (`struct rtattr` / `struct nlattr`: u16 length, u16
/// type, payload, 4-byte aligned) in `b`, as (type without the nested and
/// byte-order flags, payload); stops at a malformed one.
pub fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([b[0], b[1]]));
        let ty = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let data = &b[4..len];
        b = b.get((len + 3) & !3..).unwrap_or(&[]);
        Some((ty, data))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attrs_walks_aligned_and_stops_at_garbage() {
        // (len 5, type 3, "a\0" padded), (len 8, type 4, u32 1500), then a
        // length past the end.
        let mut b = vec![5, 0, 3, 0, b'a', 0, 0, 0, 8, 0, 4, 0];
        b.extend_from_slice(&1500u32.to_ne_bytes());
        b.extend_from_slice(&[200, 0, 1, 0]);
        let v: Vec<(u16, Vec<u8>)> = attrs(&b).map(|(t, d)| (t, d.to_vec())).collect();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0], (3, vec![b'a']));
        assert_eq!(v[1], (4, 1500u32.to_ne_bytes().to_vec()));
    }
}
