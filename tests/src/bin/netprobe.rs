//! Bounded traffic for tests, run inside a namespace with `ip netns exec`.
//! Every mode stops by itself; results go to stdout, one line per attempt.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream, UdpSocket},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Accept TCP connections and echo what they send, for SECS seconds.
    TcpListen {
        addr: SocketAddr,
        #[arg(long = "for", default_value_t = 5)]
        secs: u64,
        /// Keep each connection open (a thread of its own), echoing every
        /// read until the peer closes; after the first echo, send one
        /// segment of the connection by a raw socket, with the right
        /// acknowledgment number but a sequence number `OUT_OF_WINDOW_AHEAD`
        /// bytes beyond the socket's, far past the peer's receive window:
        /// conntrack on the way finds it out of window ("SEQ is over upper
        /// bound"), and the peer's TCP drops it (or answers it). IPv4 only.
        #[arg(long)]
        out_of_window: bool,
    },
    /// Connect COUNT times (each bounded by the timeout) and send a line.
    TcpConnect {
        addr: SocketAddr,
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// On each connection, send a line and read its echo ROUNDS times,
        /// INTERVAL apart (a long-lived client); one line per round after
        /// the first (`round N: ...`).
        #[arg(long, default_value_t = 1)]
        rounds: u32,
        #[arg(long, default_value_t = 300)]
        interval_ms: u64,
    },
    /// Echo UDP datagrams for SECS seconds.
    UdpEcho {
        addr: SocketAddr,
        #[arg(long = "for", default_value_t = 5)]
        secs: u64,
    },
    /// Bind a UDP socket and never read it, for SECS seconds (a server too
    /// slow for its load: its receive buffer fills).
    UdpHold {
        addr: SocketAddr,
        #[arg(long = "for", default_value_t = 5)]
        secs: u64,
    },
    /// Listen with an accept queue of BACKLOG and never accept, for SECS
    /// seconds (a server stuck before accept(): its queue fills).
    TcpBacklog {
        addr: SocketAddr,
        #[arg(long, default_value_t = 0)]
        backlog: i32,
        #[arg(long = "for", default_value_t = 5)]
        secs: u64,
    },
    /// Connect once and keep the connection open and idle for SECS
    /// seconds (an established entry in conntrack).
    TcpHold {
        addr: SocketAddr,
        #[arg(long = "for", default_value_t = 5)]
        secs: u64,
    },
    /// Connect COUNT times, INTERVAL apart, each closed at once (a soak).
    TcpChurn {
        addr: SocketAddr,
        #[arg(long, default_value_t = 1000)]
        count: u32,
        #[arg(long, default_value_t = 10)]
        interval_ms: u64,
    },
    /// Accept connections for SECS seconds; print each one's byte count and
    /// FNV-1a hash when it closes.
    TcpSink {
        addr: SocketAddr,
        #[arg(long = "for", default_value_t = 10)]
        secs: u64,
    },
    /// Send BYTES deterministic bytes (from SEED) and print their hash.
    TcpSource {
        addr: SocketAddr,
        #[arg(long, default_value_t = 1 << 20)]
        bytes: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Send COUNT datagrams as fast as possible, no replies awaited.
    UdpFlood {
        addr: SocketAddr,
        #[arg(long, default_value_t = 1000)]
        count: u32,
    },
    /// COUNT flows, one datagram each, like the clients of a busy DNS
    /// server: every (source address, source port) pair from --src and the
    /// ports 1024-65535 is its own 5-tuple. The last OPEN sockets stay open,
    /// so an echo's reply finds its socket; PPS paces (0: no pacing).
    UdpSpray {
        addr: SocketAddr,
        #[arg(long, required = true)]
        src: Vec<std::net::IpAddr>,
        #[arg(long, default_value_t = 1000)]
        count: u32,
        #[arg(long, default_value_t = 256)]
        open: usize,
        #[arg(long, default_value_t = 0)]
        pps: u32,
    },
    /// Answer DNS queries over UDP and TCP (RFC 7766: each message after
    /// its 2-byte length) on ADDR for SECS seconds, by the name asked:
    /// `nx.*` NXDOMAIN, `silent.*` no reply at all, `big.*` over UDP an
    /// empty reply with the TC bit (too big for UDP), over TCP in full
    /// (`BIG_ANSWERS` A records, more than 512 bytes), anything else one
    /// A record, 192.0.2.10 (RFC 5737's documentation range).
    DnsServe {
        addr: SocketAddr,
        #[arg(long = "for", default_value_t = 5)]
        secs: u64,
    },
    /// Ask for the A record of each NAME in turn from one UDP socket (DNS
    /// ids 0x1000, 0x1001, ...), each waiting up to the timeout; one line
    /// per name: its RCODE and answer count, or `no answer`. A truncated
    /// answer (TC bit) is asked again over TCP, as a resolver does (RFC
    /// 7766), on a connection of its own: a second line, `NAME tcp ...`.
    DnsQuery {
        addr: SocketAddr,
        #[arg(required = true)]
        names: Vec<String>,
        #[arg(long, default_value_t = 500)]
        timeout_ms: u64,
        /// Take a truncated answer as it is, no retry over TCP (dig's
        /// `+ignore`).
        #[arg(long)]
        ignore_tc: bool,
        /// Take a reply only from ADDR, as stub resolvers do (glibc's
        /// res_send, busybox nslookup, dig): one from another source is
        /// printed (`NAME reply from unexpected source: SRC, expected
        /// ADDR`) and ignored, and the wait goes on.
        #[arg(long)]
        expect_source: bool,
        /// Ask from this local address (a fixed source port: a resolver
        /// that keeps one socket, as envoy's or nginx's do).
        #[arg(long)]
        bind: Option<SocketAddr>,
    },
    /// Send COUNT datagrams, each waiting up to the timeout for a reply.
    UdpSend {
        addr: SocketAddr,
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// Pad each datagram to SIZE bytes of payload (0: a short line).
        #[arg(long, default_value_t = 0)]
        size: usize,
        /// Send from this local address (a fixed source port: one flow).
        #[arg(long)]
        bind: Option<SocketAddr>,
        /// Send each datagram by sendmmsg(2), a batch of one with the
        /// address in its msg_name (as resolvers batch their queries).
        #[arg(long)]
        sendmmsg: bool,
    },
    /// Delete every IPv4 entry of the conntrack table of the namespace it
    /// runs in, as `conntrack -F` does (ctnetlink IPCTNL_MSG_CT_DELETE
    /// with no tuple), and print how many there were.
    ConntrackFlush,
    /// Send COUNT IP-in-IP packets (IP protocol 4, as Calico's `tunl0`
    /// sends them) to OUTER_DST by a raw socket, from this node's own
    /// address (the kernel writes the outer header): each carries an inner
    /// IPv4 header from INNER_SRC to INNER's address and a UDP datagram to
    /// INNER's port (checksum 0, as RFC 768 allows).
    IpipSend {
        outer_dst: std::net::Ipv4Addr,
        inner: std::net::SocketAddrV4,
        #[arg(long)]
        inner_src: std::net::Ipv4Addr,
        #[arg(long, default_value_t = 3)]
        count: u32,
        /// After each packet, wait up to 500 ms for an ICMP error about
        /// it (one that quotes protocol 4 to OUTER_DST) and print one line
        /// per packet: what came back, or `no ICMP answer`.
        #[arg(long)]
        report_icmp: bool,
    },
    /// Send COUNT SCTP INIT chunks (IP protocol 132, what an SCTP
    /// client's connect() sends: the common header from SRC_PORT to
    /// ADDR's port, verification tag 0, CRC32c checksum; one INIT chunk)
    /// to ADDR by a raw socket, from this node's own address (the kernel
    /// writes the IP header). Every INIT is of one association (same
    /// ports, same initiate tag), as the retransmissions of a client's
    /// INIT are. Each waits up to the timeout for what comes back: an SCTP
    /// packet from ADDR (INIT ACK, ABORT) or an ICMP error quoting the
    /// INIT; one line per INIT. Works where the kernel has no SCTP (the
    /// raw sockets take the answers).
    SctpSend {
        addr: std::net::SocketAddrV4,
        #[arg(long, default_value_t = 3)]
        count: u32,
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        #[arg(long, default_value_t = 40132)]
        src_port: u16,
    },
}

#[expect(
    clippy::too_many_lines,
    reason = "one match over the modes, each arm a call or a short loop"
)]
fn main() -> Result<()> {
    match Args::parse().mode {
        Mode::TcpListen {
            addr,
            secs,
            out_of_window,
        } => {
            if out_of_window {
                tcp_listen_oow(addr, Duration::from_secs(secs))
            } else {
                tcp_listen(addr, Duration::from_secs(secs))
            }
        }
        Mode::TcpConnect {
            addr,
            timeout_ms,
            count,
            rounds,
            interval_ms,
        } => {
            let timeout = Duration::from_millis(timeout_ms);
            for _ in 0..count {
                if rounds <= 1 {
                    println!("{}", tcp_connect(addr, timeout));
                } else {
                    tcp_rounds(addr, timeout, rounds, Duration::from_millis(interval_ms));
                }
            }
            Ok(())
        }
        Mode::ConntrackFlush => conntrack_flush(),
        Mode::IpipSend {
            outer_dst,
            inner,
            inner_src,
            count,
            report_icmp,
        } => ipip_send(outer_dst, inner, inner_src, count, report_icmp),
        Mode::SctpSend {
            addr,
            count,
            timeout_ms,
            src_port,
        } => sctp_send(addr, count, Duration::from_millis(timeout_ms), src_port),
        Mode::UdpEcho { addr, secs } => udp_echo(addr, Duration::from_secs(secs)),
        Mode::DnsServe { addr, secs } => dns_serve(addr, Duration::from_secs(secs)),
        Mode::DnsQuery {
            addr,
            names,
            timeout_ms,
            ignore_tc,
            expect_source,
            bind,
        } => dns_query(
            addr,
            &names,
            Duration::from_millis(timeout_ms),
            !ignore_tc,
            expect_source,
            bind,
        ),
        Mode::TcpBacklog {
            addr,
            backlog,
            secs,
        } => tcp_backlog(addr, backlog, Duration::from_secs(secs)),
        Mode::TcpHold { addr, secs } => tcp_hold(addr, Duration::from_secs(secs)),
        Mode::UdpHold { addr, secs } => {
            let _sock = UdpSocket::bind(addr).with_context(|| format!("bind {addr}"))?;
            std::thread::sleep(Duration::from_secs(secs));
            Ok(())
        }
        Mode::TcpChurn {
            addr,
            count,
            interval_ms,
        } => {
            let (mut ok, mut failed) = (0, 0);
            for _ in 0..count {
                match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                    Ok(_) => ok += 1,
                    Err(_) => failed += 1,
                }
                std::thread::sleep(Duration::from_millis(interval_ms));
            }
            println!("connections ok {ok} failed {failed}");
            Ok(())
        }
        Mode::TcpSink { addr, secs } => {
            let l = TcpListener::bind(addr).with_context(|| format!("bind {addr}"))?;
            l.set_nonblocking(true)?;
            let end = Instant::now() + Duration::from_secs(secs);
            while Instant::now() < end {
                match l.accept() {
                    Ok((mut s, _)) => {
                        s.set_nonblocking(false)?;
                        let mut h = Fnv::new();
                        let mut n = 0usize;
                        let mut buf = vec![0u8; 65536];
                        loop {
                            match s.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(k) => {
                                    h.write(&buf[..k]);
                                    n += k;
                                }
                            }
                        }
                        println!("received {n} bytes hash {:016x}", h.0);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            Ok(())
        }
        Mode::TcpSource { addr, bytes, seed } => {
            let data = pattern(bytes, seed);
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
            s.write_all(&data)?;
            let mut h = Fnv::new();
            h.write(&data);
            println!("sent {bytes} bytes hash {:016x}", h.0);
            Ok(())
        }
        Mode::UdpFlood { addr, count } => {
            let sock = UdpSocket::bind(if addr.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            })?;
            for i in 0..count {
                let _ = sock.send_to(&i.to_be_bytes(), addr);
            }
            println!("sent {count} datagrams");
            Ok(())
        }
        Mode::UdpSpray {
            addr,
            src,
            count,
            open,
            pps,
        } => udp_spray(addr, &src, count, open, pps),
        Mode::UdpSend {
            addr,
            timeout_ms,
            count,
            size,
            bind,
            sendmmsg,
        } => {
            let local = bind.unwrap_or_else(|| {
                if addr.is_ipv4() {
                    "0.0.0.0:0".parse().unwrap()
                } else {
                    "[::]:0".parse().unwrap()
                }
            });
            let sock = UdpSocket::bind(local).with_context(|| format!("bind {local}"))?;
            sock.set_read_timeout(Some(Duration::from_millis(timeout_ms)))?;
            for i in 0..count {
                let mut msg = format!("probe {i}\n").into_bytes();
                if size > msg.len() {
                    msg.resize(size, b'.');
                }
                if sendmmsg {
                    send_mmsg(&sock, &msg, addr)?;
                } else {
                    sock.send_to(&msg, addr)?;
                }
                let mut buf = [0u8; 512];
                match sock.recv_from(&mut buf) {
                    Ok((n, from)) => println!("reply {n} bytes from {from}"),
                    Err(e) => println!("no reply: {e}"),
                }
            }
            Ok(())
        }
    }
}

/// `msg` to `addr` on `sock` by sendmmsg(2): one message, its address in
/// msg_name.
fn send_mmsg(sock: &UdpSocket, msg: &[u8], addr: SocketAddr) -> Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: zeroed sockaddr_storage is valid; it is filled as the
    // family's struct below, within its size.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in>(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: a zeroed sockaddr_in6 is valid.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in6>(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // SAFETY: a zeroed mmsghdr is valid; its pointers are set to live
    // locals below.
    let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
    m.msg_hdr.msg_name = (&raw mut ss).cast();
    m.msg_hdr.msg_namelen = len as libc::socklen_t;
    m.msg_hdr.msg_iov = &raw mut iov;
    m.msg_hdr.msg_iovlen = 1;
    // SAFETY: one valid mmsghdr whose name and iovec outlive the call.
    let r = unsafe { libc::sendmmsg(sock.as_raw_fd(), &raw mut m, 1, 0) };
    anyhow::ensure!(r == 1, "sendmmsg: {}", std::io::Error::last_os_error());
    Ok(())
}

/// FNV-1a, 64 bit: enough to tell two byte streams apart.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf29ce484222325)
    }
    fn write(&mut self, b: &[u8]) {
        for x in b {
            self.0 ^= *x as u64;
            self.0 = self.0.wrapping_mul(0x100000001b3);
        }
    }
}

/// Deterministic bytes (xorshift64 from `seed`).
fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn tcp_connect(addr: SocketAddr, timeout: Duration) -> String {
    match TcpStream::connect_timeout(&addr, timeout) {
        Ok(mut s) => {
            let _ = s.set_read_timeout(Some(timeout));
            let _ = s.write_all(b"hello\n");
            let mut buf = [0u8; 64];
            match s.read(&mut buf) {
                Ok(n) => format!("connected, echo {n} bytes"),
                Err(e) => format!("connected, no echo: {e}"),
            }
        }
        Err(e) => format!("connect failed: {e}"),
    }
}

/// Listen with an accept queue of `backlog` and never accept.
fn tcp_backlog(addr: SocketAddr, backlog: i32, dur: Duration) -> Result<()> {
    let l = TcpListener::bind(addr).with_context(|| format!("bind {addr}"))?;
    // listen() on a listening socket sets its accept queue's size.
    // SAFETY: a valid socket descriptor owned by `l`.
    if unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), backlog) } != 0 {
        anyhow::bail!("listen: {}", std::io::Error::last_os_error());
    }
    std::thread::sleep(dur);
    drop(l);
    Ok(())
}

/// Connect and keep the connection open, idle.
fn tcp_hold(addr: SocketAddr, dur: Duration) -> Result<()> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connect {addr}"))?;
    println!("connected to {addr}");
    std::thread::sleep(dur);
    drop(s);
    Ok(())
}

fn tcp_listen(addr: SocketAddr, dur: Duration) -> Result<()> {
    let l = TcpListener::bind(addr).with_context(|| format!("bind {addr}"))?;
    l.set_nonblocking(true)?;
    let end = Instant::now() + dur;
    while Instant::now() < end {
        match l.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                let mut buf = [0u8; 512];
                if let Ok(n) = s.read(&mut buf) {
                    let _ = s.write_all(&buf[..n]);
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    Ok(())
}

/// One connection, ROUNDS exchanges of a line and its echo, `interval`
/// apart: the first printed as `tcp_connect` prints it, the others as
/// `round N: echo K bytes` or what went wrong.
fn tcp_rounds(addr: SocketAddr, timeout: Duration, rounds: u32, interval: Duration) {
    let mut s = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) => {
            println!("connect failed: {e}");
            return;
        }
    };
    let _ = s.set_read_timeout(Some(timeout));
    let mut buf = [0u8; 64];
    for round in 1..=rounds {
        if round > 1 {
            std::thread::sleep(interval);
        }
        let line = match s.write_all(b"hello\n").and_then(|()| s.read(&mut buf)) {
            Ok(0) => "connection closed by the peer".to_string(),
            Ok(n) => format!("echo {n} bytes"),
            Err(e) => format!("no echo: {e}"),
        };
        if round == 1 {
            println!("connected, {line}");
        } else {
            println!("round {round}: {line}");
        }
        if !line.starts_with("echo") {
            return;
        }
    }
}

/// How far beyond the connection's own next sequence number the
/// out-of-window segment's is: far more than any window of a connection
/// this young.
const OUT_OF_WINDOW_AHEAD: u32 = 1_000_000;

/// `tcp-listen --out-of-window`: each connection in a thread of its own,
/// echoed until the peer closes (or `dur` ends); after its first echo,
/// [`send_out_of_window`].
fn tcp_listen_oow(addr: SocketAddr, dur: Duration) -> Result<()> {
    let l = TcpListener::bind(addr).with_context(|| format!("bind {addr}"))?;
    l.set_nonblocking(true)?;
    let end = Instant::now() + dur;
    while Instant::now() < end {
        match l.accept() {
            Ok((s, _)) => {
                std::thread::spawn(move || echo_with_oow_segment(s, end));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    Ok(())
}

fn echo_with_oow_segment(mut s: TcpStream, end: Instant) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 512];
    let mut sent = false;
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
                if !sent {
                    sent = true;
                    if let Err(e) = send_out_of_window(&s) {
                        eprintln!("out-of-window segment not sent: {e:#}");
                    }
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// The connection's next sequence number to send and to receive, read in
/// TCP repair mode (TCP_QUEUE_SEQ of its send and receive queues; root),
/// which is left at once without a window probe.
fn connection_seqs(s: &TcpStream) -> std::io::Result<(u32, u32)> {
    use std::os::fd::AsRawFd;
    const TCP_RECV_QUEUE: libc::c_int = 1;
    const TCP_SEND_QUEUE: libc::c_int = 2;
    const TCP_REPAIR_OFF_NO_WP: libc::c_int = -1;
    let fd = s.as_raw_fd();
    let set = |opt: libc::c_int, val: libc::c_int| -> std::io::Result<()> {
        // SAFETY: a valid socket and an int option.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_TCP,
                opt,
                std::ptr::from_ref(&val).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    let queue_seq = |queue: libc::c_int| -> std::io::Result<u32> {
        set(libc::TCP_REPAIR_QUEUE, queue)?;
        let mut v: u32 = 0;
        let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
        // SAFETY: a valid socket and a u32 the option fills.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_TCP,
                libc::TCP_QUEUE_SEQ,
                std::ptr::from_mut(&mut v).cast(),
                &raw mut len,
            )
        };
        if r == 0 {
            Ok(v)
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    set(libc::TCP_REPAIR, 1)?;
    let seqs = queue_seq(TCP_SEND_QUEUE).and_then(|snd| Ok((snd, queue_seq(TCP_RECV_QUEUE)?)));
    set(libc::TCP_REPAIR, TCP_REPAIR_OFF_NO_WP)?;
    seqs
}

/// Send, by a raw socket, one segment of `s`'s connection (from its local
/// address and port to its peer's): PSH|ACK, sequence number
/// [`OUT_OF_WINDOW_AHEAD`] bytes beyond the socket's next, acknowledging
/// what it has received, with a short payload.
fn send_out_of_window(s: &TcpStream) -> Result<()> {
    let (SocketAddr::V4(local), SocketAddr::V4(peer)) = (s.local_addr()?, s.peer_addr()?) else {
        anyhow::bail!("IPv4 only");
    };
    let (snd_nxt, rcv_nxt) = connection_seqs(s).context("TCP_REPAIR")?;
    let payload = b"out of window\n";
    let mut seg = Vec::with_capacity(20 + payload.len());
    seg.extend_from_slice(&local.port().to_be_bytes());
    seg.extend_from_slice(&peer.port().to_be_bytes());
    seg.extend_from_slice(&snd_nxt.wrapping_add(OUT_OF_WINDOW_AHEAD).to_be_bytes());
    seg.extend_from_slice(&rcv_nxt.to_be_bytes());
    seg.extend_from_slice(&[0x50, 0x18]); // data offset 5 words; PSH|ACK
    seg.extend_from_slice(&502u16.to_be_bytes()); // window
    seg.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    seg.extend_from_slice(payload);
    // The checksum over the pseudo-header (RFC 793) and the segment.
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&local.ip().octets());
    add(&peer.ip().octets());
    add(&[0, 6]);
    add(&u16::try_from(seg.len())?.to_be_bytes());
    add(&seg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    seg[16..18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    // SAFETY: plain socket calls on a descriptor closed below.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_TCP);
        anyhow::ensure!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
        let mut to: libc::sockaddr_in = std::mem::zeroed();
        to.sin_family = libc::AF_INET as libc::sa_family_t;
        to.sin_addr.s_addr = u32::from_ne_bytes(peer.ip().octets());
        let r = libc::sendto(
            fd,
            seg.as_ptr().cast(),
            seg.len(),
            0,
            std::ptr::from_ref(&to).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        anyhow::ensure!(r >= 0, "sendto: {err}");
    }
    Ok(())
}

/// [`Mode::IpipSend`]: the inner packets, each in one raw-socket send of
/// protocol 4 (IPPROTO_IPIP) to `outer_dst`; with `report_icmp`, each
/// followed by what ICMP said of it.
fn ipip_send(
    outer_dst: std::net::Ipv4Addr,
    inner: std::net::SocketAddrV4,
    inner_src: std::net::Ipv4Addr,
    count: u32,
    report_icmp: bool,
) -> Result<()> {
    let sock = RawSock::open(libc::IPPROTO_IPIP)?;
    let icmp = if report_icmp {
        Some(RawSock::open(libc::IPPROTO_ICMP)?)
    } else {
        None
    };
    let mut sent = 0;
    for i in 0..count {
        let payload = format!("ipip {i}\n");
        let total = u16::try_from(20 + 8 + payload.len())?;
        let mut pkt = Vec::with_capacity(usize::from(total));
        pkt.extend_from_slice(&[0x45, 0]);
        pkt.extend_from_slice(&total.to_be_bytes());
        pkt.extend_from_slice(&(0x4000u16 + u16::try_from(i % 0x1000)?).to_be_bytes()); // id
        pkt.extend_from_slice(&[0x40, 0, 64, 17, 0, 0]); // DF, TTL 64, UDP, checksum
        pkt.extend_from_slice(&inner_src.octets());
        pkt.extend_from_slice(&inner.ip().octets());
        let mut sum: u32 = pkt
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        pkt[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        pkt.extend_from_slice(&(40000 + u16::try_from(i % 1000)?).to_be_bytes());
        pkt.extend_from_slice(&inner.port().to_be_bytes());
        pkt.extend_from_slice(&u16::try_from(8 + payload.len())?.to_be_bytes());
        pkt.extend_from_slice(&[0, 0]);
        pkt.extend_from_slice(payload.as_bytes());
        match sock.send_to(&pkt, outer_dst) {
            Ok(()) => sent += 1,
            Err(e) => println!("sendto: {e}"),
        }
        match &icmp {
            Some(icmp) => {
                let deadline = Instant::now() + Duration::from_millis(500);
                let mut buf = [0u8; 2048];
                let mut seen = None;
                while seen.is_none() {
                    let Some(n) = icmp.recv_until(&mut buf, deadline) else {
                        break;
                    };
                    seen = icmp_error(&buf[..n], outer_dst, 4, None);
                }
                println!(
                    "packet {i}: {}",
                    seen.unwrap_or_else(|| "no ICMP answer".into())
                );
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    println!("sent {sent} IPIP packets to {outer_dst} (inner {inner_src} -> {inner})");
    Ok(())
}

/// A raw IPv4 socket of one protocol, closed on drop. What it receives
/// begins with the IP header; what it sends does not (the kernel writes
/// it).
struct RawSock(std::os::fd::OwnedFd);

impl RawSock {
    fn open(proto: libc::c_int) -> Result<RawSock> {
        use std::os::fd::FromRawFd;
        // SAFETY: socket(2); the descriptor is owned from here.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto) };
        anyhow::ensure!(
            fd >= 0,
            "raw socket of protocol {proto}: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: a fresh descriptor of ours.
        Ok(RawSock(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }

    fn send_to(&self, pkt: &[u8], dst: std::net::Ipv4Addr) -> std::io::Result<()> {
        // SAFETY: a zeroed sockaddr_in filled in, and a buffer that lives
        // across the call.
        let r = unsafe {
            let mut to: libc::sockaddr_in = std::mem::zeroed();
            to.sin_family = libc::AF_INET as libc::sa_family_t;
            to.sin_addr.s_addr = u32::from_ne_bytes(dst.octets());
            libc::sendto(
                self.fd(),
                pkt.as_ptr().cast(),
                pkt.len(),
                0,
                std::ptr::from_ref(&to).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// A packet waiting on the socket, if there is one (no wait).
    fn recv_now(&self, buf: &mut [u8]) -> Option<usize> {
        // SAFETY: recv(2) into a buffer of ours, its length given.
        let n = unsafe {
            libc::recv(
                self.fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        usize::try_from(n).ok().filter(|n| *n > 0)
    }

    /// The next packet, if one comes before `deadline`.
    fn recv_until(&self, buf: &mut [u8], deadline: Instant) -> Option<usize> {
        loop {
            wait_readable(&[self], deadline)?;
            if let Some(n) = self.recv_now(buf) {
                return Some(n);
            }
        }
    }
}

/// The index of one of `socks` that has a packet to read, once one has
/// (None when `deadline` passes first).
fn wait_readable(socks: &[&RawSock], deadline: Instant) -> Option<usize> {
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
        // SAFETY: poll(2) on an array of pollfds that lives across the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r > 0 {
            return fds.iter().position(|f| f.revents & libc::POLLIN != 0);
        }
    }
}

/// An IPv4 packet's header length, source, destination and protocol.
fn ipv4_parts(p: &[u8]) -> Option<(usize, std::net::Ipv4Addr, std::net::Ipv4Addr, u8)> {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    if ihl < 20 || p.len() < ihl {
        return None;
    }
    let addr = |at: usize| std::net::Ipv4Addr::new(p[at], p[at + 1], p[at + 2], p[at + 3]);
    Some((ihl, addr(12), addr(16), p[9]))
}

/// What an ICMP packet `p` (its IP header first) says of a packet of
/// protocol `proto` this host sent to `dst` (and, when given, to port
/// `dport`: the quoted header's first bytes after the IP header are the
/// ports, as in TCP, UDP and SCTP): None when it is not an error about
/// such a packet.
fn icmp_error(p: &[u8], dst: std::net::Ipv4Addr, proto: u8, dport: Option<u16>) -> Option<String> {
    let (ihl, src, _, p_proto) = ipv4_parts(p)?;
    let icmp = p.get(ihl..).filter(|i| i.len() >= 8 && p_proto == 1)?;
    let (ty, code) = (icmp[0], icmp[1]);
    if !matches!(ty, 3 | 11 | 12) {
        return None;
    }
    let quoted = &icmp[8..];
    let (qihl, _, qdst, qproto) = ipv4_parts(quoted)?;
    if qdst != dst || qproto != proto {
        return None;
    }
    if let Some(port) = dport {
        let l4 = quoted.get(qihl..qihl + 4)?;
        if u16::from_be_bytes([l4[2], l4[3]]) != port {
            return None;
        }
    }
    let what = match (ty, code) {
        (3, 0) => "network unreachable".to_string(),
        (3, 1) => "host unreachable".to_string(),
        (3, 2) => "protocol unreachable".to_string(),
        (3, 3) => "port unreachable".to_string(),
        (3, 4) => "fragmentation needed".to_string(),
        (3, 9 | 10 | 13) => "administratively prohibited".to_string(),
        (11, _) => "time exceeded".to_string(),
        (12, _) => "parameter problem".to_string(),
        (_, c) => format!("destination unreachable (code {c})"),
    };
    Some(format!("ICMP {what} from {src}"))
}

/// CRC32c (Castagnoli, reflected, RFC 9260 appendix A), SCTP's checksum.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 0 {
                crc >> 1
            } else {
                (crc >> 1) ^ 0x82F6_3B78
            };
        }
    }
    !crc
}

/// An SCTP packet of one INIT chunk (RFC 9260 3.3.2) from `sport` to
/// `dport`: verification tag 0, no optional parameters, the checksum
/// over the whole packet (stored as the kernel stores it,
/// sctp_compute_cksum(): little-endian).
fn sctp_init(sport: u16, dport: u16, init_tag: u32, tsn: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(32);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&0u32.to_be_bytes()); // verification tag: 0 in an INIT
    p.extend_from_slice(&0u32.to_be_bytes()); // checksum, below
    p.extend_from_slice(&[1, 0]); // chunk type INIT, no flags
    p.extend_from_slice(&20u16.to_be_bytes()); // chunk length
    p.extend_from_slice(&init_tag.to_be_bytes());
    p.extend_from_slice(&106_496u32.to_be_bytes()); // a_rwnd
    p.extend_from_slice(&10u16.to_be_bytes()); // outbound streams
    p.extend_from_slice(&65535u16.to_be_bytes()); // inbound streams
    p.extend_from_slice(&tsn.to_be_bytes()); // initial TSN
    let crc = crc32c(&p);
    p[8..12].copy_from_slice(&crc.to_le_bytes());
    p
}

/// What an SCTP packet `p` (its IP header first) is, when it comes from
/// `from` to `sport`: an answer to our INIT.
fn sctp_answer(p: &[u8], from: std::net::SocketAddrV4, sport: u16) -> Option<String> {
    let (ihl, src, _, proto) = ipv4_parts(p)?;
    let s = p.get(ihl..).filter(|s| s.len() >= 16)?;
    if proto != 132
        || src != *from.ip()
        || u16::from_be_bytes([s[0], s[1]]) != from.port()
        || u16::from_be_bytes([s[2], s[3]]) != sport
    {
        return None;
    }
    Some(match s[12] {
        2 => format!("INIT ACK from {from}"),
        6 => format!("ABORT from {from}"),
        t => format!("SCTP chunk type {t} from {from}"),
    })
}

/// [`Mode::SctpSend`].
fn sctp_send(
    addr: std::net::SocketAddrV4,
    count: u32,
    timeout: Duration,
    src_port: u16,
) -> Result<()> {
    let sctp = RawSock::open(libc::IPPROTO_SCTP)?;
    let icmp = RawSock::open(libc::IPPROTO_ICMP)?;
    // One association: the initiate tag and TSN of a client's first INIT,
    // the same in its retransmissions.
    let tag = 0x5c7b_1e01u32 ^ u32::from(src_port);
    let init = sctp_init(src_port, addr.port(), tag, tag.rotate_left(13));
    let mut buf = [0u8; 2048];
    for i in 0..count {
        if let Err(e) = sctp.send_to(&init, *addr.ip()) {
            println!("INIT {i}: sendto: {e}");
            continue;
        }
        let deadline = Instant::now() + timeout;
        let mut seen = None;
        while seen.is_none() {
            let Some(k) = wait_readable(&[&sctp, &icmp], deadline) else {
                break;
            };
            let sock = if k == 0 { &sctp } else { &icmp };
            let Some(n) = sock.recv_now(&mut buf) else {
                continue;
            };
            seen = if k == 0 {
                sctp_answer(&buf[..n], addr, src_port)
            } else {
                icmp_error(&buf[..n], *addr.ip(), 132, Some(addr.port()))
            };
        }
        // What came back is taken at once; the next INIT waits out the
        // timeout, as a client's retransmission timer does.
        if let Some(left) = deadline.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
        println!(
            "INIT {i} to {addr}: {}",
            seen.unwrap_or_else(|| format!("no answer in {} ms", timeout.as_millis()))
        );
    }
    Ok(())
}

/// `conntrack -F` for IPv4, over ctnetlink: IPCTNL_MSG_CT_DELETE
/// (NFNL_SUBSYS_CTNETLINK) with no tuple flushes the table of the
/// caller's namespace; the kernel's acknowledgment is awaited.
fn conntrack_flush() -> Result<()> {
    const NETLINK_NETFILTER: libc::c_int = 12;
    const CT_DELETE: u16 = (1 << 8) | 2;
    let before = std::fs::read_to_string("/proc/net/nf_conntrack")
        .map(|t| t.lines().filter(|l| l.starts_with("ipv4")).count())
        .ok();
    let mut msg = Vec::with_capacity(20);
    msg.extend_from_slice(&20u32.to_ne_bytes()); // nlmsg_len
    msg.extend_from_slice(&CT_DELETE.to_ne_bytes()); // nlmsg_type
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16;
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // nlmsg_seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid
    msg.extend_from_slice(&[libc::AF_INET as u8, 0, 0, 0]); // nfgenmsg
    // SAFETY: plain socket calls on a descriptor closed below.
    let errno = unsafe {
        let fd = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, NETLINK_NETFILTER);
        anyhow::ensure!(
            fd >= 0,
            "netlink socket: {}",
            std::io::Error::last_os_error()
        );
        let tv = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::from_ref(&tv).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
        let mut to: libc::sockaddr_nl = std::mem::zeroed();
        to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let sent = libc::sendto(
            fd,
            msg.as_ptr().cast(),
            msg.len(),
            0,
            std::ptr::from_ref(&to).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        );
        let mut ack = [0u8; 256];
        let got = if sent < 0 {
            -1
        } else {
            libc::recv(fd, ack.as_mut_ptr().cast(), ack.len(), 0)
        };
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        anyhow::ensure!(got >= 20, "ctnetlink: {err}");
        // NLMSG_ERROR (2) with error 0 is the acknowledgment.
        let kind = u16::from_ne_bytes([ack[4], ack[5]]);
        anyhow::ensure!(kind == 2, "ctnetlink answered message type {kind}");
        i32::from_ne_bytes([ack[16], ack[17], ack[18], ack[19]])
    };
    anyhow::ensure!(
        errno == 0,
        "ctnetlink flush: {}",
        std::io::Error::from_raw_os_error(-errno)
    );
    match before {
        Some(n) => println!("flushed {n} conntrack entries"),
        None => println!("flushed the conntrack table"),
    }
    Ok(())
}

#[expect(
    clippy::unnecessary_wraps,
    reason = "every mode has the same signature (main dispatches on it)"
)]
fn udp_spray(
    addr: SocketAddr,
    src: &[std::net::IpAddr],
    count: u32,
    open: usize,
    pps: u32,
) -> Result<()> {
    let mut kept = std::collections::VecDeque::with_capacity(open + 1);
    let (mut sent, mut failed) = (0u32, 0u32);
    let start = Instant::now();
    'all: for a in src {
        for port in 1024..=65535u16 {
            if sent == count {
                break 'all;
            }
            // A port in use here (or failing to send) is skipped, not
            // counted: COUNT is the number of distinct flows sent.
            let Ok(sock) = UdpSocket::bind(SocketAddr::new(*a, port)) else {
                failed += 1;
                continue;
            };
            if sock.send_to(&sent.to_be_bytes(), addr).is_err() {
                failed += 1;
                continue;
            }
            sent += 1;
            kept.push_back(sock);
            if kept.len() > open {
                kept.pop_front();
            }
            if pps > 0 {
                let due = Duration::from_secs_f64(sent as f64 / pps as f64);
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
    }
    // Replies to the last sockets still have a home for a moment.
    std::thread::sleep(Duration::from_millis(200));
    println!(
        "sent {sent} flows, {failed} ports skipped, {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn udp_echo(addr: SocketAddr, dur: Duration) -> Result<()> {
    let s = UdpSocket::bind(addr).with_context(|| format!("bind {addr}"))?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    let end = Instant::now() + dur;
    let mut buf = [0u8; 2048];
    while Instant::now() < end {
        if let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    }
    Ok(())
}

/// A records in the TCP answer for `big.*`: 40 of them make a message of
/// 673 bytes, past the 512 bytes of a classic DNS message over UDP.
const BIG_ANSWERS: u8 = 40;

/// dns-serve's reply to the message `q`, or None (not DNS, no question,
/// or a name it ignores).
fn dns_reply(q: &[u8], tcp: bool) -> Option<Vec<u8>> {
    use simple_dns::{CLASS, Packet, PacketFlag, RCODE, ResourceRecord, rdata};
    let q = Packet::parse(q).ok()?;
    let question = q.questions.first().cloned()?;
    let name = question.qname.to_string();
    if name.starts_with("silent.") {
        return None;
    }
    let a = |last: u8| {
        ResourceRecord::new(
            question.qname.clone(),
            CLASS::IN,
            30,
            rdata::RData::A(rdata::A {
                address: u32::from(std::net::Ipv4Addr::new(192, 0, 2, last)),
            }),
        )
    };
    let mut r = q.clone().into_reply();
    if name.starts_with("nx.") {
        *r.rcode_mut() = RCODE::NameError;
    } else if name.starts_with("big.") && !tcp {
        r.set_flags(PacketFlag::TRUNCATION);
    } else if name.starts_with("big.") {
        r.answers.extend((1..=BIG_ANSWERS).map(a));
    } else {
        r.answers.push(a(10));
    }
    r.build_bytes_vec().ok()
}

fn dns_serve(addr: SocketAddr, dur: Duration) -> Result<()> {
    let s = UdpSocket::bind(addr).with_context(|| format!("bind udp {addr}"))?;
    let l = TcpListener::bind(addr).with_context(|| format!("bind tcp {addr}"))?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    l.set_nonblocking(true)?;
    let end = Instant::now() + dur;
    let tcp = std::thread::spawn(move || {
        while Instant::now() < end {
            match l.accept() {
                Ok((c, _)) => dns_serve_tcp(c, end),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    let mut buf = [0u8; 2048];
    while Instant::now() < end {
        let Ok((n, from)) = s.recv_from(&mut buf) else {
            continue;
        };
        if let Some(b) = dns_reply(&buf[..n], false) {
            let _ = s.send_to(&b, from);
        }
    }
    tcp.join()
        .map_err(|_| anyhow::anyhow!("the TCP server thread panicked"))
}

/// One DNS-over-TCP connection: each query (2-byte length, message) gets
/// its reply written the same way, in one write, until the client closes
/// or goes quiet.
fn dns_serve_tcp(mut c: TcpStream, end: Instant) {
    let _ = c.set_nonblocking(false);
    let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
    while Instant::now() < end {
        let mut len = [0u8; 2];
        if c.read_exact(&mut len).is_err() {
            return;
        }
        let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if c.read_exact(&mut q).is_err() {
            return;
        }
        let Some(r) = dns_reply(&q, true) else {
            continue;
        };
        let Ok(n) = u16::try_from(r.len()) else {
            return;
        };
        let mut framed = n.to_be_bytes().to_vec();
        framed.extend_from_slice(&r);
        if c.write_all(&framed).is_err() {
            return;
        }
    }
}

fn dns_query(
    addr: SocketAddr,
    names: &[String],
    timeout: Duration,
    tcp_retry: bool,
    expect_source: bool,
    bind: Option<SocketAddr>,
) -> Result<()> {
    use simple_dns::{CLASS, Name, Packet, PacketFlag, QCLASS, QTYPE, Question, TYPE};
    let local: SocketAddr = match bind {
        Some(b) => b,
        None if addr.is_ipv4() => "0.0.0.0:0".parse()?,
        None => "[::]:0".parse()?,
    };
    let s = UdpSocket::bind(local).with_context(|| format!("bind {local}"))?;
    s.set_read_timeout(Some(timeout))?;
    let mut buf = [0u8; 2048];
    for (i, name) in names.iter().enumerate() {
        let id = 0x1000 + u16::try_from(i).context("too many names")?;
        let mut q = Packet::new_query(id);
        q.set_flags(PacketFlag::RECURSION_DESIRED);
        q.questions.push(Question::new(
            Name::new(name).with_context(|| format!("name {name}"))?,
            QTYPE::TYPE(TYPE::A),
            QCLASS::CLASS(CLASS::IN),
            false,
        ));
        let query = q.build_bytes_vec()?;
        s.send_to(&query, addr)?;
        let mut truncated = false;
        let deadline = Instant::now() + timeout;
        let reply = loop {
            match s.recv_from(&mut buf) {
                Ok((_, from)) if expect_source && from != addr => {
                    println!("{name} reply from unexpected source: {from}, expected {addr}");
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break Err(std::io::ErrorKind::TimedOut.into());
                    }
                    s.set_read_timeout(Some(left))?;
                }
                r => break r,
            }
        };
        s.set_read_timeout(Some(timeout))?;
        let line = match reply {
            Ok((n, _)) => match Packet::parse(&buf[..n]) {
                Ok(r) => {
                    truncated = r.has_flags(PacketFlag::TRUNCATION);
                    format!(
                        "{name} {:?} {} answers{}",
                        r.rcode(),
                        r.answers.len(),
                        if truncated { " truncated" } else { "" }
                    )
                }
                Err(e) => format!("{name} bad reply: {e}"),
            },
            Err(_) => format!("{name} no answer"),
        };
        println!("{line}");
        if truncated && tcp_retry {
            println!("{name} tcp {}", dns_query_tcp(addr, &query, timeout));
        }
    }
    Ok(())
}

/// `query` asked over a TCP connection of its own (RFC 7766): the reply's
/// RCODE and answer count, or what went wrong.
fn dns_query_tcp(addr: SocketAddr, query: &[u8], timeout: Duration) -> String {
    use simple_dns::Packet;
    let ask = || -> std::io::Result<Vec<u8>> {
        let mut c = TcpStream::connect_timeout(&addr, timeout)?;
        c.set_read_timeout(Some(timeout))?;
        let len = u16::try_from(query.len()).map_err(std::io::Error::other)?;
        // Length and message in one write: one segment, as resolvers send.
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(query);
        c.write_all(&framed)?;
        let mut n = [0u8; 2];
        c.read_exact(&mut n)?;
        let mut r = vec![0u8; usize::from(u16::from_be_bytes(n))];
        c.read_exact(&mut r)?;
        Ok(r)
    };
    match ask() {
        Ok(r) => match Packet::parse(&r) {
            Ok(p) => format!("{:?} {} answers", p.rcode(), p.answers.len()),
            Err(e) => format!("bad reply: {e}"),
        },
        Err(e) => format!("no answer: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_is_castagnoli() {
        // RFC 3720 B.4's check value.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn an_init_checks_out() {
        let p = sctp_init(40132, 8082, 1, 2);
        assert_eq!(p.len(), 32);
        assert_eq!(&p[..4], &[0x9c, 0xc4, 0x1f, 0x92]);
        let mut z = p.clone();
        z[8..12].fill(0);
        assert_eq!(u32::from_le_bytes(p[8..12].try_into().unwrap()), crc32c(&z));
    }

    #[test]
    fn an_icmp_protocol_unreachable_is_read() {
        // 10.0.0.2 tells 10.0.0.1 that protocol 132 to it is unreachable.
        let mut p = vec![
            0x45, 0, 0, 56, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1,
        ];
        p.extend_from_slice(&[3, 2, 0, 0, 0, 0, 0, 0]);
        p.extend_from_slice(&[0x45, 0, 0, 52, 0, 0, 0x40, 0, 64, 132, 0, 0]);
        p.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        p.extend_from_slice(&[0x9c, 0xc4, 0x1f, 0x92, 0, 0, 0, 0]);
        let dst = std::net::Ipv4Addr::new(10, 0, 0, 2);
        assert_eq!(
            icmp_error(&p, dst, 132, Some(8082)).as_deref(),
            Some("ICMP protocol unreachable from 10.0.0.2")
        );
        assert_eq!(icmp_error(&p, dst, 132, Some(8083)), None);
        assert_eq!(icmp_error(&p, dst, 4, None), None);
    }
}
