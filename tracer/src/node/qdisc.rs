//! The queueing disciplines of a device, as `tc -s qdisc show dev DEV`
//! lists them: an RTM_GETQDISC dump of the device's namespace, each
//! qdisc's kind, handle, parent, counters (TCA_STATS2) and, for the kinds
//! that drop at a limit (tbf, pfifo, bfifo), that limit and a token
//! bucket's rate and burst. Read where a followed packet was dropped by a
//! qdisc (a shaped pod's egress, a full fifo).

use std::{fmt, path::Path};

use serde::{Deserialize, Serialize};

use super::netlink::{NLMSG_HDRLEN, attr, dump, ne32, string};

/// TC_H_ROOT and TC_H_INGRESS (include/uapi/linux/pkt_sched.h): the
/// parents of a device's root qdisc and of its ingress/clsact qdisc.
const TC_H_ROOT: u32 = 0xFFFF_FFFF;
const TC_H_INGRESS: u32 = 0xFFFF_FFF1;
/// TC_H_MAJ_MASK (include/uapi/linux/pkt_sched.h).
const TC_H_MAJ_MASK: u32 = 0xFFFF_0000;

/// TCA_KIND, TCA_OPTIONS, TCA_STATS, TCA_STATS2 (enum in
/// include/uapi/linux/rtnetlink.h).
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_STATS: u16 = 3;
const TCA_STATS2: u16 = 7;
/// TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 (enum in
/// include/uapi/linux/gen_stats.h).
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_QUEUE: u16 = 3;
const TCA_STATS_PKT64: u16 = 8;
/// TCA_TBF_PARMS, TCA_TBF_RATE64 (enum in include/uapi/linux/pkt_sched.h).
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
/// sizeof(struct tcmsg) (include/uapi/linux/rtnetlink.h): family, pad,
/// ifindex, handle, parent, info.
const TCMSG_LEN: usize = 20;

/// One qdisc of a device: an RTM_NEWQDISC message (struct tcmsg, then
/// TCA_* attributes; tc_fill_qdisc() in net/sched/sch_api.c).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Qdisc {
    /// TCA_KIND: `tbf`, `pfifo`, `fq_codel`, `htb`, `ingress`, `clsact`,
    /// `noqueue`...
    pub kind: String,
    /// tcm_handle as `MAJ:MIN` in hex, as tc(8) writes it (`1:0`).
    pub handle: String,
    /// tcm_parent: `root` (TC_H_ROOT), `ingress` (TC_H_INGRESS, also
    /// clsact's), else `MAJ:MIN` (a class of another qdisc, `1:1`).
    pub parent: String,
    /// Packets sent (struct gnet_stats_basic, or TCA_STATS_PKT64 once the
    /// 32-bit count wrapped).
    pub packets: u64,
    /// Bytes sent (struct gnet_stats_basic).
    pub bytes: u64,
    /// struct gnet_stats_queue (include/uapi/linux/gen_stats.h): packets
    /// dropped.
    pub drops: u32,
    /// struct gnet_stats_queue: times the qdisc was over its limit (a
    /// token bucket without tokens: the packet waits, or is dropped).
    pub overlimits: u32,
    /// struct gnet_stats_queue: packets in the queue now.
    pub qlen: u32,
    /// struct gnet_stats_queue: bytes in the queue now.
    pub backlog: u32,
    /// The limits of the kinds that have one (TCA_OPTIONS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<QdiscParams>,
}

/// The limits of a qdisc (its TCA_OPTIONS), for the kinds that drop at one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QdiscParams {
    /// A token bucket: TCA_TBF_PARMS (struct tc_tbf_qopt,
    /// include/uapi/linux/pkt_sched.h) and TCA_TBF_RATE64.
    Tbf {
        /// Bytes per second (tc_ratespec.rate, or TCA_TBF_RATE64 when the
        /// rate does not fit 32 bits).
        rate: u64,
        /// The bucket's size in bytes: `buffer_ticks` at `rate`, converted
        /// with /proc/net/psched as tc(8) does ([`ticks_to_bytes`]). None
        /// when /proc/net/psched is unreadable.
        burst: Option<u64>,
        /// tc_tbf_qopt.buffer: the bucket's size in psched ticks, the time
        /// `rate` takes to send a burst.
        buffer_ticks: u32,
        /// tc_tbf_qopt.limit: bytes that may wait for tokens; more are
        /// dropped.
        limit: u32,
    },
    /// pfifo and pfifo_head_drop: struct tc_fifo_qopt.
    Pfifo {
        /// tc_fifo_qopt.limit: packets queued at most; more are dropped.
        limit: u32,
    },
    /// bfifo: struct tc_fifo_qopt.
    Bfifo {
        /// tc_fifo_qopt.limit: bytes queued at most; more are dropped.
        limit: u32,
    },
}

/// The qdiscs of device `ifindex` in the namespace at `path` (entered on
/// this thread), or of this thread's namespace when None, by one
/// RTM_GETQDISC dump. Empty when nothing can be read.
pub fn qdiscs_in(path: Option<&Path>, ifindex: u32) -> Vec<Qdisc> {
    let _g = match path.map(crate::node::netns::NetnsGuard::enter) {
        Some(Ok(g)) => Some(g),
        Some(Err(_)) => return Vec::new(),
        None => None,
    };
    let psched = std::fs::read_to_string("/proc/net/psched")
        .ok()
        .and_then(|t| Psched::parse(&t));
    let mut body = vec![0u8; TCMSG_LEN];
    // tcm_family AF_UNSPEC (0), tcm_ifindex at 4.
    body[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    let mut out = Vec::new();
    let ok = dump(
        libc::NETLINK_ROUTE,
        libc::RTM_GETQDISC,
        &body,
        &mut |ty, msg| {
            if ty != libc::RTM_NEWQDISC {
                return;
            }
            // The kernel may answer with every device's qdiscs.
            if let Some((index, q)) = parse_qdisc(msg, psched.as_ref())
                && index == ifindex
            {
                out.push(q);
            }
        },
    );
    if ok.is_none() {
        return Vec::new();
    }
    out
}

/// One RTM_NEWQDISC message, header included: its device's ifindex and
/// the qdisc. None when it is too short or has no TCA_KIND.
fn parse_qdisc(msg: &[u8], psched: Option<&Psched>) -> Option<(u32, Qdisc)> {
    let tcm = msg.get(NLMSG_HDRLEN..NLMSG_HDRLEN + TCMSG_LEN)?;
    // struct tcmsg: ifindex at 4, handle at 8, parent at 12.
    let ifindex = ne32(&tcm[4..])?;
    let handle = ne32(&tcm[8..])?;
    let parent = ne32(&tcm[12..])?;
    let attrs = &msg[NLMSG_HDRLEN + TCMSG_LEN..];
    let kind = string(attr(attrs, TCA_KIND)?);
    let c = counters(attrs);
    let params = attr(attrs, TCA_OPTIONS).and_then(|o| params(&kind, o, psched));
    Some((
        ifindex,
        Qdisc {
            kind,
            handle: tc_handle(handle),
            parent: parent_name(parent),
            packets: c.packets,
            bytes: c.bytes,
            drops: c.drops,
            overlimits: c.overlimits,
            qlen: c.qlen,
            backlog: c.backlog,
            params,
        },
    ))
}

/// A handle as tc(8) prints one, `MAJ:MIN` in hex (with the minor
/// written out: `1:0`).
fn tc_handle(h: u32) -> String {
    format!("{:x}:{:x}", (h & TC_H_MAJ_MASK) >> 16, h & !TC_H_MAJ_MASK)
}

/// A parent: `root`, `ingress`, or a class handle.
fn parent_name(p: u32) -> String {
    match p {
        TC_H_ROOT => "root".into(),
        TC_H_INGRESS => "ingress".into(),
        p => tc_handle(p),
    }
}

/// A qdisc's counters.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counters {
    packets: u64,
    bytes: u64,
    drops: u32,
    overlimits: u32,
    qlen: u32,
    backlog: u32,
}

/// The counters of TCA_STATS2 (nested TCA_STATS_*), or of the older
/// TCA_STATS (struct tc_stats) when there is no TCA_STATS2. Zero when
/// neither is there.
fn counters(attrs: &[u8]) -> Counters {
    let u64_at = |b: &[u8], at: usize| {
        b.get(at..at + 8)
            .and_then(|v| v.try_into().ok())
            .map(u64::from_ne_bytes)
    };
    let u32_at = |b: &[u8], at: usize| b.get(at..).and_then(ne32);
    let mut c = Counters::default();
    if let Some(s2) = attr(attrs, TCA_STATS2) {
        // struct gnet_stats_basic: bytes u64, packets u32.
        if let Some(b) = attr(s2, TCA_STATS_BASIC) {
            c.bytes = u64_at(b, 0).unwrap_or(0);
            c.packets = u32_at(b, 8).unwrap_or(0).into();
        }
        if let Some(p) = attr(s2, TCA_STATS_PKT64).and_then(|b| u64_at(b, 0)) {
            c.packets = p;
        }
        // struct gnet_stats_queue: qlen, backlog, drops, requeues,
        // overlimits (u32 each).
        if let Some(q) = attr(s2, TCA_STATS_QUEUE) {
            c.qlen = u32_at(q, 0).unwrap_or(0);
            c.backlog = u32_at(q, 4).unwrap_or(0);
            c.drops = u32_at(q, 8).unwrap_or(0);
            c.overlimits = u32_at(q, 16).unwrap_or(0);
        }
    } else if let Some(s) = attr(attrs, TCA_STATS) {
        // struct tc_stats: bytes u64, packets, drops, overlimits, bps,
        // pps, qlen, backlog (u32 each).
        c.bytes = u64_at(s, 0).unwrap_or(0);
        c.packets = u32_at(s, 8).unwrap_or(0).into();
        c.drops = u32_at(s, 12).unwrap_or(0);
        c.overlimits = u32_at(s, 16).unwrap_or(0);
        c.qlen = u32_at(s, 28).unwrap_or(0);
        c.backlog = u32_at(s, 32).unwrap_or(0);
    }
    c
}

/// The limits in a qdisc's TCA_OPTIONS, for the kinds that have one.
fn params(kind: &str, opts: &[u8], psched: Option<&Psched>) -> Option<QdiscParams> {
    match kind {
        "tbf" => tbf_params(opts, psched),
        // struct tc_fifo_qopt { __u32 limit; } (not nested).
        "pfifo" | "pfifo_head_drop" => Some(QdiscParams::Pfifo { limit: ne32(opts)? }),
        "bfifo" => Some(QdiscParams::Bfifo { limit: ne32(opts)? }),
        _ => None,
    }
}

/// tbf's TCA_OPTIONS: TCA_TBF_PARMS (struct tc_tbf_qopt: rate and
/// peakrate, struct tc_ratespec of 12 bytes with the rate in bytes per
/// second at 8; then limit, buffer, mtu) and TCA_TBF_RATE64, which
/// tbf_dump() adds when the rate does not fit 32 bits.
fn tbf_params(opts: &[u8], psched: Option<&Psched>) -> Option<QdiscParams> {
    let p = attr(opts, TCA_TBF_PARMS)?;
    let rate32 = p.get(8..).and_then(ne32)?;
    let limit = p.get(24..).and_then(ne32)?;
    let buffer_ticks = p.get(28..).and_then(ne32)?;
    let rate = attr(opts, TCA_TBF_RATE64)
        .and_then(|b| Some(u64::from_ne_bytes(b.get(..8)?.try_into().ok()?)))
        .unwrap_or(rate32.into());
    Some(QdiscParams::Tbf {
        rate,
        burst: psched.map(|s| s.ticks_to_bytes(rate, buffer_ticks)),
        buffer_ticks,
        limit,
    })
}

/// The packet scheduler's clock, /proc/net/psched (psched_show(),
/// net/sched/sch_api.c): its first three hex words, as iproute2's
/// tc_core_init() (tc/tc_core.c) reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Psched {
    /// Ticks-to-microseconds numerator (NSEC_PER_USEC).
    t2us: u32,
    /// Its denominator (PSCHED_TICKS2NS(1): one tick is 64 ns).
    us2t: u32,
    /// The clock's resolution in Hz.
    clock_res: u32,
}

/// TIME_UNITS_PER_SEC (iproute2's tc/tc_core.h): tc's time unit is the
/// microsecond.
const TIME_UNITS_PER_SEC: u128 = 1_000_000;

impl Psched {
    fn parse(text: &str) -> Option<Psched> {
        let mut w = text
            .split_whitespace()
            .map(|s| u32::from_str_radix(s, 16).ok());
        let (t2us, us2t, clock_res) = (w.next()??, w.next()??, w.next()??);
        (us2t != 0 && t2us != 0 && clock_res != 0).then_some(Psched {
            t2us,
            us2t,
            clock_res,
        })
    }

    /// The bytes `rate` (bytes per second) sends in `ticks`, as tc(8)'s
    /// tc_calc_xmitsize() computes a tbf burst (tc/tc_core.c): with
    /// tick_in_usec = t2us / us2t * clock_res / 10^6 (tc_core_init(),
    /// whose "compatibility hack" takes t2us = us2t for a clock of 1 GHz),
    /// usec = ticks / tick_in_usec (truncated, tc_core_tick2time()), and
    /// bytes = rate * usec / 10^6. Integer arithmetic.
    fn ticks_to_bytes(&self, rate: u64, ticks: u32) -> u64 {
        let t2us = if self.clock_res == 1_000_000_000 {
            self.us2t
        } else {
            self.t2us
        };
        let usec = u128::from(ticks) * u128::from(self.us2t) * TIME_UNITS_PER_SEC
            / (u128::from(t2us) * u128::from(self.clock_res));
        (u128::from(rate) * usec / TIME_UNITS_PER_SEC) as u64
    }
}

/// The bytes a token bucket of `rate` bytes per second holds when its
/// buffer is `ticks` psched ticks, with the clock of `psched_text` (the
/// text of /proc/net/psched): what `tc qdisc show` prints as `burst`. None
/// when the text is not psched's.
pub fn ticks_to_bytes(psched_text: &str, rate: u64, ticks: u32) -> Option<u64> {
    Some(Psched::parse(psched_text)?.ticks_to_bytes(rate, ticks))
}

impl fmt::Display for QdiscParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QdiscParams::Tbf {
                rate,
                burst,
                buffer_ticks,
                limit,
            } => {
                write!(f, "rate {rate} B/s, ")?;
                match burst {
                    Some(b) => write!(f, "burst {b} B, ")?,
                    None => write!(f, "buffer {buffer_ticks} ticks, ")?,
                }
                write!(f, "limit {limit} B")
            }
            QdiscParams::Pfifo { limit } => write!(f, "limit {limit} packets"),
            QdiscParams::Bfifo { limit } => write!(f, "limit {limit} B"),
        }
    }
}

/// `tbf 1:0 root (rate 125000 B/s, burst 1600 B, limit 3000 B): 161 sent,
/// 41 dropped, 52 overlimits`.
impl fmt::Display for Qdisc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ", self.kind, self.handle)?;
        match self.parent.as_str() {
            p @ ("root" | "ingress") => write!(f, "{p}")?,
            p => write!(f, "parent {p}")?,
        }
        if let Some(p) = &self.params {
            write!(f, " ({p})")?;
        }
        write!(
            f,
            ": {} sent, {} dropped, {} overlimits",
            self.packets, self.drops, self.overlimits
        )?;
        if self.qlen > 0 {
            write!(f, ", {} queued ({} B)", self.qlen, self.backlog)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::netlink::put_attr;

    /// This machine's clock (6.x: 1000 64 1000000 3b9aca00).
    const PSCHED: &str = "000003e8 00000040 000f4240 3b9aca00\n";

    /// An RTM_NEWQDISC message: header, struct tcmsg, `attrs`.
    fn message(ifindex: u32, handle: u32, parent: u32, attrs: &[u8]) -> Vec<u8> {
        let mut m = vec![0u8; NLMSG_HDRLEN + TCMSG_LEN];
        m[4..6].copy_from_slice(&libc::RTM_NEWQDISC.to_ne_bytes());
        m[20..24].copy_from_slice(&ifindex.to_ne_bytes());
        m[24..28].copy_from_slice(&handle.to_ne_bytes());
        m[28..32].copy_from_slice(&parent.to_ne_bytes());
        m.extend_from_slice(attrs);
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    /// TCA_STATS2 with TCA_STATS_BASIC and TCA_STATS_QUEUE.
    fn stats2(bytes: u64, packets: u32, queue: [u32; 5]) -> Vec<u8> {
        let mut basic = bytes.to_ne_bytes().to_vec();
        basic.extend_from_slice(&packets.to_ne_bytes());
        basic.extend_from_slice(&[0; 4]);
        let q: Vec<u8> = queue.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut s = Vec::new();
        put_attr(&mut s, TCA_STATS_BASIC, &basic);
        put_attr(&mut s, TCA_STATS_QUEUE, &q);
        let mut out = Vec::new();
        put_attr(&mut out, TCA_STATS2 | 0x8000, &s);
        out
    }

    /// struct tc_tbf_qopt of `rate` B/s, `limit` bytes, `buffer` ticks.
    fn tbf_qopt(rate: u32, limit: u32, buffer: u32) -> Vec<u8> {
        let mut p = vec![0u8; 36];
        p[8..12].copy_from_slice(&rate.to_ne_bytes());
        p[24..28].copy_from_slice(&limit.to_ne_bytes());
        p[28..32].copy_from_slice(&buffer.to_ne_bytes());
        p[32..36].copy_from_slice(&2047u32.to_ne_bytes());
        p
    }

    #[test]
    fn reads_a_token_bucket_and_its_counters() {
        let mut opts = Vec::new();
        put_attr(&mut opts, TCA_TBF_PARMS, &tbf_qopt(125_000, 3000, 200_000));
        let mut attrs = Vec::new();
        put_attr(&mut attrs, TCA_KIND, b"tbf\0");
        put_attr(&mut attrs, TCA_OPTIONS | 0x8000, &opts);
        attrs.extend(stats2(241_500, 161, [2, 3000, 41, 0, 52]));
        let psched = Psched::parse(PSCHED);
        let (index, q) = parse_qdisc(&message(1, 0x1_0000, TC_H_ROOT, &attrs), psched.as_ref())
            .expect("a qdisc");
        assert_eq!(index, 1);
        assert_eq!(
            q,
            Qdisc {
                kind: "tbf".into(),
                handle: "1:0".into(),
                parent: "root".into(),
                packets: 161,
                bytes: 241_500,
                drops: 41,
                overlimits: 52,
                qlen: 2,
                backlog: 3000,
                params: Some(QdiscParams::Tbf {
                    rate: 125_000,
                    burst: Some(1600),
                    buffer_ticks: 200_000,
                    limit: 3000,
                }),
            }
        );
        assert_eq!(
            q.to_string(),
            "tbf 1:0 root (rate 125000 B/s, burst 1600 B, limit 3000 B): 161 sent, 41 dropped, \
             52 overlimits, 2 queued (3000 B)"
        );
        // Without the clock the buffer stays in ticks.
        let (_, q) = parse_qdisc(&message(1, 0x1_0000, TC_H_ROOT, &attrs), None).unwrap();
        assert!(q.to_string().contains("buffer 200000 ticks"), "{q}");
    }

    #[test]
    fn a_64_bit_rate_overrides_the_32_bit_one() {
        let mut opts = Vec::new();
        // 100 Gbit/s: tbf_dump() caps the 32-bit rate at ~0U.
        put_attr(&mut opts, TCA_TBF_PARMS, &tbf_qopt(u32::MAX, 10_000, 64));
        put_attr(&mut opts, TCA_TBF_RATE64, &12_500_000_000u64.to_ne_bytes());
        let p = tbf_params(&opts, Psched::parse(PSCHED).as_ref());
        // 64 ticks of 64 ns = 4 us at 12.5 GB/s: 50000 bytes.
        assert_eq!(
            p,
            Some(QdiscParams::Tbf {
                rate: 12_500_000_000,
                burst: Some(50_000),
                buffer_ticks: 64,
                limit: 10_000,
            })
        );
    }

    #[test]
    fn fifos_limits_parents_and_the_old_stats() {
        let mut attrs = Vec::new();
        put_attr(&mut attrs, TCA_KIND, b"pfifo\0");
        put_attr(&mut attrs, TCA_OPTIONS, &5u32.to_ne_bytes());
        // struct tc_stats: bytes, packets, drops, overlimits, bps, pps,
        // qlen, backlog.
        let mut st = 900u64.to_ne_bytes().to_vec();
        for v in [9u32, 1, 0, 0, 0, 1, 100] {
            st.extend_from_slice(&v.to_ne_bytes());
        }
        st.extend_from_slice(&[0; 4]);
        put_attr(&mut attrs, TCA_STATS, &st);
        let (_, q) = parse_qdisc(&message(7, 0x10_0000, 0x1_0001, &attrs), None).unwrap();
        assert_eq!((q.handle.as_str(), q.parent.as_str()), ("10:0", "1:1"));
        assert_eq!(
            (q.packets, q.bytes, q.drops, q.qlen, q.backlog),
            (9, 900, 1, 1, 100)
        );
        assert_eq!(q.params, Some(QdiscParams::Pfifo { limit: 5 }));
        assert_eq!(
            q.to_string(),
            "pfifo 10:0 parent 1:1 (limit 5 packets): 9 sent, 1 dropped, 0 overlimits, 1 queued (100 B)"
        );
        assert_eq!(
            params("bfifo", &3000u32.to_ne_bytes(), None),
            Some(QdiscParams::Bfifo { limit: 3000 })
        );
        assert_eq!(params("fq_codel", &[1, 2, 3, 4], None), None);
        assert_eq!(parent_name(TC_H_INGRESS), "ingress");
        assert_eq!(tc_handle(0xffff_0000), "ffff:0");
    }

    #[test]
    fn short_or_malformed_messages_are_skipped() {
        let mut attrs = Vec::new();
        put_attr(&mut attrs, TCA_KIND, b"tbf\0");
        // TCA_OPTIONS with a truncated tc_tbf_qopt: no params, no panic.
        let mut opts = Vec::new();
        put_attr(&mut opts, TCA_TBF_PARMS, &[0u8; 20]);
        put_attr(&mut attrs, TCA_OPTIONS | 0x8000, &opts);
        put_attr(&mut attrs, TCA_STATS2 | 0x8000, &[4, 0, 1, 0]);
        let m = message(1, 0, TC_H_ROOT, &attrs);
        let (_, q) = parse_qdisc(&m, None).unwrap();
        assert_eq!((q.params, q.packets), (None, 0));
        for n in 0..NLMSG_HDRLEN + TCMSG_LEN {
            assert!(parse_qdisc(&m[..n], None).is_none());
        }
        // Without TCA_KIND it is not a qdisc.
        assert!(parse_qdisc(&message(1, 0, TC_H_ROOT, &[]), None).is_none());
        assert_eq!(params("pfifo", &[1, 2], None), None);
        assert_eq!(Psched::parse("zz 1 2"), None);
        assert_eq!(Psched::parse("3e8 0 f4240"), None);
        assert_eq!(ticks_to_bytes(PSCHED, 125_000, 200_000), Some(1600));
        // The 1 GHz clock's compatibility hack (tc_core_init()): t2us is
        // taken as us2t, a tick is a nanosecond.
        assert_eq!(ticks_to_bytes("3e8 1 3b9aca00", 1_000_000, 1000), Some(1));
    }

    /// A tbf at the root of a namespace's lo with a pfifo under it, as
    /// `tc qdisc add` makes them, read back with their counters after a
    /// burst of datagrams larger than the bucket and the fifo.
    #[test]
    fn reads_the_qdiscs_tc_added() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("!!!!! SKIPPED reads_the_qdiscs_tc_added: not root !!!!!");
            return;
        }
        let ns = crate::node::netns::TestNetns::add("tracer-qdisc");
        let path = crate::node::netns::named_dir().join(&ns.0);
        for cmd in [
            &["ip", "link", "set", "lo", "up"][..],
            &[
                "tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "tbf", "rate", "1mbit",
                "burst", "1600", "limit", "3000",
            ],
            &[
                "tc", "qdisc", "add", "dev", "lo", "parent", "1:1", "handle", "10:", "pfifo",
                "limit", "5",
            ],
        ] {
            assert!(ns.run(cmd), "{cmd:?}");
        }
        let sent = {
            let _g = crate::node::netns::NetnsGuard::enter(&path).unwrap();
            let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let to = rx.local_addr().unwrap();
            // 100 datagrams of 1000 bytes at once: the bucket (1600 B)
            // passes one, the fifo holds 5, tbf drops most of the rest.
            (0..100)
                .filter(|_| tx.send_to(&[0u8; 1000], to).is_ok())
                .count()
        };
        assert!(sent > 0);
        let qs = qdiscs_in(Some(&path), 1);
        let tbf = qs
            .iter()
            .find(|q| q.kind == "tbf")
            .unwrap_or_else(|| panic!("no tbf in {qs:?}"));
        assert_eq!((tbf.handle.as_str(), tbf.parent.as_str()), ("1:0", "root"));
        assert!(
            matches!(
                tbf.params,
                Some(QdiscParams::Tbf {
                    rate: 125_000,
                    burst: Some(1600),
                    limit: 3000,
                    ..
                })
            ),
            "{tbf}"
        );
        assert!(tbf.packets >= 1 && tbf.drops > 0, "{tbf}");
        assert!(
            tbf.to_string()
                .starts_with("tbf 1:0 root (rate 125000 B/s, burst 1600 B, limit 3000 B): "),
            "{tbf}"
        );
        let fifo = qs
            .iter()
            .find(|q| q.kind == "pfifo")
            .unwrap_or_else(|| panic!("no pfifo in {qs:?}"));
        assert_eq!(
            (fifo.handle.as_str(), fifo.parent.as_str()),
            ("10:0", "1:1")
        );
        assert_eq!(fifo.params, Some(QdiscParams::Pfifo { limit: 5 }));
        eprintln!("{tbf}\n{fifo}");
        // Another device's qdiscs are not listed; neither is a missing
        // namespace's.
        assert!(qdiscs_in(Some(&path), 999).is_empty());
        assert!(qdiscs_in(Some(Path::new("/nonexistent")), 1).is_empty());
    }
}
