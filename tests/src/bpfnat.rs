//! tc programs of the tests' own that rewrite a packet's addresses and
//! ports, as an eBPF dataplane load-balances a Service in tc (Cilium's
//! bpf_lxc and bpf_host with kube-proxy replacement, Calico's eBPF
//! dataplane): [`dnat`] sends a packet for a Service address (ClusterIP,
//! NodePort) to a backend, as it goes in; [`rev_snat`] gives a backend's
//! reply the Service address back, as it goes out. No compiler here: the
//! programs are raw instructions, loaded with bpf(2) (redirect.rs's
//! `load`), pinned in a directory of bpffs of the scene's own and attached
//! by a clsact filter or a tcx link ([`attach`], blind_bpf.rs's helpers).
//!
//! IPv4 with a 20-byte header (no options: the test packets have none),
//! TCP or UDP. Every packet gets TC_ACT_OK (0, TCX_PASS: what Cilium's
//! CTX_ACT_OK is), rewritten or not; ARP and every other packet pass as
//! they are. No conntrack: the match is on the tuple alone, as a dataplane
//! behaves for the packets of one connection once its entry exists.
//!
//! # Instruction encoding
//!
//! Each instruction is 8 bytes ([`crate::redirect::insn`]): the opcode
//! (one byte), the registers (one byte: source in the high nibble,
//! destination in the low one), a signed 16-bit offset and a signed
//! 32-bit immediate, both little-endian. The opcodes used here
//! (include/uapi/linux/bpf.h, Documentation/bpf/standardization):
//!
//! | opcode | class, op | meaning |
//! |---|---|---|
//! | `0xbf` | ALU64 MOV X | `dst = src` |
//! | `0xb7` | ALU64 MOV K | `dst = imm` (sign-extended to 64 bits) |
//! | `0x07` | ALU64 ADD K | `dst += imm` |
//! | `0x61` / `0x69` / `0x71` | LDX MEM W / H / B | `dst = *(u32 / u16 / u8 *)(src + off)` |
//! | `0x62` / `0x6a` | ST MEM W / H | `*(u32 / u16 *)(dst + off) = imm` |
//! | `0x2d` | JMP JGT X | `if dst > src goto pc + 1 + off` |
//! | `0x56` | JMP32 JNE K | `if (u32)dst != imm goto pc + 1 + off` |
//! | `0x85` | JMP CALL | call helper number `imm` (arguments r1-r5, result r0; r1-r5 are clobbered, r6-r9 kept) |
//! | `0x95` | JMP EXIT | return r0 |
//!
//! r1 holds the `struct __sk_buff *` on entry; `data` is at offset 76 of
//! it and `data_end` at 80. At tc ingress and egress (clsact or tcx) the
//! data starts at the Ethernet header: the IPv4 header is at 14, its
//! checksum at 24, source address at 26, destination at 30, the L4 ports
//! at 34 (source) and 36 (destination), the TCP checksum at 50 and the
//! UDP one at 40. A field is compared as a little-endian load of its
//! network-order bytes reads it, so the constants below are the addresses'
//! octets and the ports' bytes read that way.
//!
//! The match reads the packet directly (one bounds check against
//! `data_end`); the rewrite goes through helpers, after which packet
//! pointers are invalid (the verifier refuses their use): the new bytes
//! are written from the stack by `bpf_skb_store_bytes` (helper 9), the IP
//! checksum fixed by `bpf_l3_csum_replace` (helper 10, size 4 in the
//! flags) and the L4 one by `bpf_l4_csum_replace` (helper 11): for the
//! address with `BPF_F_PSEUDO_HDR` (0x10: it is in the pseudo-header),
//! size 4, for the port size 2 (the size is the flags' low 4 bits); UDP
//! adds `BPF_F_MARK_MANGLED_0` (0x20: a checksum of 0 means none, and a
//! result of 0 is written 0xffff), as Cilium does. The helpers' results
//! are not checked: the test packets are linear and writable.

use std::net::Ipv4Addr;

use anyhow::Result;

use crate::{
    blind_bpf::{BPF_PROG_TYPE_SCHED_CLS, clsact, pinned, tc_filter, tcx},
    netns::Netns,
    redirect::insn,
    scenarios::ScratchDir,
};

pub use crate::bpfdrop::{TCP, UDP};

/// include/uapi/linux/bpf.h
const BPF_FUNC_SKB_STORE_BYTES: i32 = 9;
const BPF_FUNC_L3_CSUM_REPLACE: i32 = 10;
const BPF_FUNC_L4_CSUM_REPLACE: i32 = 11;
const BPF_F_PSEUDO_HDR: i32 = 0x10;
const BPF_F_MARK_MANGLED_0: i32 = 0x20;
/// TC_ACT_OK (TCX_PASS).
const TC_OK: i32 = 0;

/// Offsets from the Ethernet header (a 20-byte IPv4 header).
const ETHERTYPE: i16 = 12;
const IP_VER_IHL: i16 = 14;
const IP_PROTO: i16 = 23;
const IP_CSUM: i32 = 24;
const IP_SRC: i16 = 26;
const IP_DST: i16 = 30;
const L4_SPORT: i16 = 34;
const L4_DPORT: i16 = 36;
const TCP_CSUM: i32 = 50;
const UDP_CSUM: i32 = 40;

/// An address as the little-endian u32 load of its bytes reads it.
fn addr_le(a: Ipv4Addr) -> i32 {
    i32::from_le_bytes(a.octets())
}

/// A port as the little-endian u16 load of its network-order bytes reads
/// it.
fn port_le(p: u16) -> i32 {
    i32::from(p.swap_bytes())
}

/// One rewrite: packets of `proto` whose address at `addr_off` is `from`
/// and port at `port_off` is `from_port` get `to` and `to_port` there.
struct Rewrite {
    proto: u8,
    addr_off: i16,
    port_off: i16,
    from: Ipv4Addr,
    from_port: u16,
    to: Ipv4Addr,
    to_port: u16,
    /// Whether the L4 checksum is fixed for the rewrite (false: left
    /// stale, as a dataplane's bug leaves it; the IP header's is fixed).
    fix_l4: bool,
}

/// Instructions with jumps to the program's end ("out"), patched once
/// the end is known.
struct Prog {
    insns: Vec<[u8; 8]>,
    to_out: Vec<usize>,
}

impl Prog {
    fn push(&mut self, i: [u8; 8]) {
        self.insns.push(i);
    }

    /// `if (u32)r5 != imm goto out`.
    fn jne_out(&mut self, imm: i32) {
        self.to_out.push(self.insns.len());
        self.insns.push(insn(0x56, 5, 0, 0, imm));
    }

    /// A helper call with r1 = the skb (kept in r6) and r2-r5 as given
    /// (`None`: r3 points at the stack slot `stack_off` from r10).
    fn call(&mut self, helper: i32, r2: i32, r3: Option<i32>, stack_off: i32, r4: i32, r5: i32) {
        self.push(insn(0xbf, 1, 6, 0, 0)); // r1 = r6
        self.push(insn(0xb7, 2, 0, 0, r2));
        if let Some(v) = r3 {
            self.push(insn(0xb7, 3, 0, 0, v));
        } else {
            self.push(insn(0xbf, 3, 10, 0, 0)); // r3 = r10
            self.push(insn(0x07, 3, 0, 0, stack_off)); // r3 += off
        }
        self.push(insn(0xb7, 4, 0, 0, r4));
        self.push(insn(0xb7, 5, 0, 0, r5));
        self.push(insn(0x85, 0, 0, 0, helper));
    }

    /// The program's end (`r0 = TC_ACT_OK; exit`), every jump to it
    /// patched; the bytes to load.
    fn finish(mut self) -> Vec<u8> {
        let out = self.insns.len();
        for &i in &self.to_out {
            let off = i16::try_from(out - i - 1).expect("short program");
            self.insns[i][2..4].copy_from_slice(&off.to_le_bytes());
        }
        self.insns.push(insn(0xb7, 0, 0, 0, TC_OK));
        self.insns.push(insn(0x95, 0, 0, 0, 0));
        self.insns.concat()
    }
}

fn rewrite(r: &Rewrite) -> Vec<u8> {
    let mut p = Prog {
        insns: vec![],
        to_out: vec![],
    };
    // The match: direct packet access after one bounds check.
    p.push(insn(0xbf, 6, 1, 0, 0)); // r6 = skb (kept across calls)
    p.push(insn(0x61, 2, 6, 76, 0)); // r2 = skb->data
    p.push(insn(0x61, 3, 6, 80, 0)); // r3 = skb->data_end
    p.push(insn(0xbf, 4, 2, 0, 0)); // r4 = r2
    p.push(insn(0x07, 4, 0, 0, 38)); // r4 += 14 + 20 + 4 (through the ports)
    p.to_out.push(p.insns.len());
    p.push(insn(0x2d, 4, 3, 0, 0)); // if r4 > r3 goto out
    p.push(insn(0x69, 5, 2, ETHERTYPE, 0));
    p.jne_out(0x0008); // htons(ETH_P_IP)
    p.push(insn(0x71, 5, 2, IP_VER_IHL, 0));
    p.jne_out(0x45); // version 4, 20-byte header
    p.push(insn(0x71, 5, 2, IP_PROTO, 0));
    p.jne_out(i32::from(r.proto));
    p.push(insn(0x61, 5, 2, r.addr_off, 0));
    p.jne_out(addr_le(r.from));
    p.push(insn(0x69, 5, 2, r.port_off, 0));
    p.jne_out(port_le(r.from_port));
    // The rewrite: no packet pointer is used from here on.
    let (csum, mangled) = if r.proto == UDP {
        (UDP_CSUM, BPF_F_MARK_MANGLED_0)
    } else {
        (TCP_CSUM, 0)
    };
    let (from, to) = (addr_le(r.from), addr_le(r.to));
    p.push(insn(0x62, 10, 0, -4, to)); // *(u32 *)(r10 - 4) = new address
    p.call(
        BPF_FUNC_SKB_STORE_BYTES,
        i32::from(r.addr_off),
        None,
        -4,
        4,
        0,
    );
    p.call(BPF_FUNC_L3_CSUM_REPLACE, IP_CSUM, Some(from), 0, to, 4);
    if r.fix_l4 {
        p.call(
            BPF_FUNC_L4_CSUM_REPLACE,
            csum,
            Some(from),
            0,
            to,
            BPF_F_PSEUDO_HDR | mangled | 4,
        );
    }
    let (from_port, to_port) = (port_le(r.from_port), port_le(r.to_port));
    p.push(insn(0x6a, 10, 0, -8, to_port)); // *(u16 *)(r10 - 8) = new port
    p.call(
        BPF_FUNC_SKB_STORE_BYTES,
        i32::from(r.port_off),
        None,
        -8,
        2,
        0,
    );
    if r.fix_l4 {
        p.call(
            BPF_FUNC_L4_CSUM_REPLACE,
            csum,
            Some(from_port),
            0,
            to_port,
            mangled | 2,
        );
    }
    p.finish()
}

/// For IPv4 packets of `proto` (6 TCP, 17 UDP) to `vip:vport`: the
/// destination becomes `backend:bport` (checksums fixed). Every packet
/// gets TC_ACT_OK.
pub fn dnat(proto: u8, vip: Ipv4Addr, vport: u16, backend: Ipv4Addr, bport: u16) -> Vec<u8> {
    rewrite(&Rewrite {
        proto,
        addr_off: IP_DST,
        port_off: L4_DPORT,
        from: vip,
        from_port: vport,
        to: backend,
        to_port: bport,
        fix_l4: true,
    })
}

/// [`dnat`] with the L4 checksum left as it was (the IP header's is
/// fixed): a dataplane bug that the receiving stack finds as a bad TCP
/// or UDP checksum (blind_stack.rs).
pub fn dnat_stale_l4(
    proto: u8,
    vip: Ipv4Addr,
    vport: u16,
    backend: Ipv4Addr,
    bport: u16,
) -> Vec<u8> {
    rewrite(&Rewrite {
        proto,
        addr_off: IP_DST,
        port_off: L4_DPORT,
        from: vip,
        from_port: vport,
        to: backend,
        to_port: bport,
        fix_l4: false,
    })
}

/// The reverse, for the replies: IPv4 packets of `proto` from
/// `backend:bport` get the source `vip:vport`. Every packet gets
/// TC_ACT_OK.
pub fn rev_snat(proto: u8, backend: Ipv4Addr, bport: u16, vip: Ipv4Addr, vport: u16) -> Vec<u8> {
    rewrite(&Rewrite {
        proto,
        addr_off: IP_SRC,
        port_off: L4_SPORT,
        from: backend,
        from_port: bport,
        to: vip,
        to_port: vport,
        fix_l4: true,
    })
}

/// Which hook of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Ingress,
    Egress,
}

/// How a program is attached there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// A direct-action filter of a clsact qdisc (added if missing), as
    /// Calico and Cilium before 1.16 (or on kernels before 6.6) attach.
    Clsact,
    /// A tcx link (kernels >= 6.6; a clsact filter before), as Cilium >=
    /// 1.16 attaches.
    Tcx,
}

/// `prog` (sched_cls) named `name` (the kernel keeps 15 bytes:
/// `cil_from_container` is `cil_from_contai`) on `dev`'s `dir` hook in
/// `n`, by `link`; pinned as `file` in `pins` (the scene's bpffs
/// directory), so it is removed with the scene (the clsact filter and the
/// tcx link go with their device, with the namespace).
#[expect(
    clippy::too_many_arguments,
    reason = "where (namespace, device, hook, link) and what (pin, program, name)"
)]
pub(crate) fn attach(
    n: &Netns,
    dev: &str,
    dir: Dir,
    link: Link,
    pins: &ScratchDir,
    file: &str,
    prog: &[u8],
    name: &str,
) -> Result<()> {
    match link {
        Link::Tcx => tcx(n, dev, dir == Dir::Egress, pins, file, prog, name),
        Link::Clsact => {
            let pin = pinned(pins, file, BPF_PROG_TYPE_SCHED_CLS, prog, name)?;
            // The qdisc may be there already (the other hook's program).
            let _ = clsact(n, dev);
            let hook = match dir {
                Dir::Ingress => "ingress",
                Dir::Egress => "egress",
            };
            tc_filter(n, dev, hook, &pin)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insns(p: &[u8]) -> Vec<&[u8]> {
        p.chunks(8).collect()
    }

    fn imm(i: &[u8]) -> i32 {
        i32::from_le_bytes(i[4..8].try_into().unwrap())
    }

    /// Every conditional jump lands on the final `r0 = 0; exit`.
    #[test]
    fn every_miss_returns_ok() {
        for p in [
            dnat(
                TCP,
                "10.241.100.10".parse().unwrap(),
                80,
                "10.241.102.2".parse().unwrap(),
                8080,
            ),
            rev_snat(
                UDP,
                "10.241.102.2".parse().unwrap(),
                53,
                "10.241.100.10".parse().unwrap(),
                53,
            ),
        ] {
            let is = insns(&p);
            let out = is.len() - 2;
            assert_eq!(is[out][0], 0xb7);
            assert_eq!(imm(is[out]), TC_OK);
            assert_eq!(is[out + 1][0], 0x95);
            let mut jumps = 0;
            for (i, ins) in is.iter().enumerate() {
                if matches!(ins[0], 0x2d | 0x56) {
                    jumps += 1;
                    let off = i16::from_le_bytes([ins[2], ins[3]]);
                    assert_eq!(i + 1 + usize::try_from(off).unwrap(), out, "insn {i}");
                }
            }
            assert_eq!(jumps, 6);
        }
    }

    /// The constants are what a little-endian load of the wire bytes
    /// reads, and the helpers get the right offsets and flags.
    #[test]
    fn helpers_get_offsets_and_flags() {
        let p = dnat(
            UDP,
            "10.241.100.10".parse().unwrap(),
            53,
            "10.241.102.2".parse().unwrap(),
            5353,
        );
        let is = insns(&p);
        let calls: Vec<usize> = (0..is.len()).filter(|&i| is[i][0] == 0x85).collect();
        let helpers: Vec<i32> = calls.iter().map(|&i| imm(is[i])).collect();
        assert_eq!(helpers, [9, 10, 11, 9, 11]);
        // r2 (offset) and r5 (flags) of each call.
        let arg = |call: usize, reg: u8| {
            is[..call]
                .iter()
                .rev()
                .find(|i| i[0] == 0xb7 && i[1] & 0x0f == reg)
                .map(|i| imm(i))
                .unwrap()
        };
        assert_eq!(arg(calls[0], 2), 30);
        assert_eq!(arg(calls[1], 2), 24);
        assert_eq!(arg(calls[1], 5), 4);
        assert_eq!(arg(calls[2], 2), 40);
        assert_eq!(arg(calls[2], 5), 0x10 | 0x20 | 4);
        assert_eq!(arg(calls[3], 2), 36);
        assert_eq!(arg(calls[4], 5), 0x20 | 2);
        assert_eq!(arg(calls[2], 3), i32::from_le_bytes([10, 241, 100, 10]));
        assert_eq!(
            arg(calls[4], 4),
            i32::from(u16::from_le_bytes(5353u16.to_be_bytes()))
        );
        let tcp = rev_snat(
            TCP,
            "10.241.102.2".parse().unwrap(),
            8080,
            "10.241.100.10".parse().unwrap(),
            80,
        );
        let is = insns(&tcp);
        let l4: Vec<i32> = (0..is.len())
            .filter(|&i| is[i][0] == 0x85 && imm(is[i]) == 11)
            .map(|i| {
                is[..i]
                    .iter()
                    .rev()
                    .find(|x| x[0] == 0xb7 && x[1] & 0x0f == 2)
                    .map(|x| imm(x))
                    .unwrap()
            })
            .collect();
        assert_eq!(l4, [50, 50]);
    }
}
