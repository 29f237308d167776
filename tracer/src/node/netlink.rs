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
