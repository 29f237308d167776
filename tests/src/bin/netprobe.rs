//! Bounded traffic for tests, run inside a namespace with `ip netns exec`.
//! Every mode stops by itself; results go to stdout, one line per attempt.

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
    },
    /// Connect COUNT times (each bounded by the timeout) and send a line.
    TcpConnect {
        addr: SocketAddr,
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Echo UDP datagrams for SECS seconds.
    UdpEcho {
        addr: SocketAddr,
        #[arg(long = "for", default_value_t = 5)]
        secs: u64,
    },
    /// Send COUNT datagrams, each waiting up to the timeout for a reply.
    UdpSend {
        addr: SocketAddr,
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
}

fn main() -> Result<()> {
    match Args::parse().mode {
        Mode::TcpListen { addr, secs } => tcp_listen(addr, Duration::from_secs(secs)),
        Mode::TcpConnect {
            addr,
            timeout_ms,
            count,
        } => {
            for _ in 0..count {
                println!("{}", tcp_connect(addr, Duration::from_millis(timeout_ms)));
            }
            Ok(())
        }
        Mode::UdpEcho { addr, secs } => udp_echo(addr, Duration::from_secs(secs)),
        Mode::UdpSend {
            addr,
            timeout_ms,
            count,
        } => {
            let sock = UdpSocket::bind(if addr.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            })?;
            sock.set_read_timeout(Some(Duration::from_millis(timeout_ms)))?;
            for i in 0..count {
                sock.send_to(format!("probe {i}\n").as_bytes(), addr)?;
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
