//! A `Session` owns everything tracer holds in the kernel while it
//! follows a target: the loaded programs and maps, their attachments, the
//! tc links or filters on every interface, and the ring buffer. It is
//! built by [`Session::start`] and torn down by `Drop` on every path
//! (errors, signals, the end of the run); [`Session::finish`] tears down
//! early to time it.

use std::{
    collections::HashMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use aya::maps::{MapData, MapError, PerCpuArray, PerCpuHashMap, RingBuf};
use tokio::io::unix::AsyncFd;
use tracer_common::{AGG_HOT_SLOTS, AggHot, AggKey, AggVal};

use crate::{
    kernel::btf::{Btf, BtfError, offsets},
    kernel::error_chain,
    kernel::loader::{
        self, Counters, LoadError, counters, probes,
        tc::{TcError, TcManager, TcMode, TcScope},
    },
    kernel::tracer_lock::TracerLock,
    model::names::{Kallsyms, Names},
    model::target::Target,
    node::netns::NetnsRef,
};

/// Why a session could not start, or its ring buffer or maps be read.
/// The loader's and tc's errors pass through as they are.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(
        "this kernel exposes no BTF ({path} missing): tracer needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"
    )]
    NoBtf { path: PathBuf },
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Tc(#[from] TcError),
    #[error("read kernel BTF for program loading")]
    ProgramBtf(#[source] aya::BtfError),
    #[error("read the kernel programs' log")]
    BpfLog(#[source] aya_log::Error),
    #[error("interface(s) {0} not found in the traced namespace(s)")]
    MissingIfaces(String),
    #[error("register ring buffer: {0}")]
    RingRegister(std::io::Error),
    #[error("wait on the ring buffer")]
    RingWait(#[source] std::io::Error),
    /// Said in a warning line: the map error is part of the message.
    #[error("read the {map} map: {}", error_chain(.err))]
    Map { map: &'static str, err: MapError },
}

/// What to follow and how to attach.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub target: Target,
    /// Traced namespaces; empty: every namespace, tc on tracer's own.
    pub netns: Vec<NetnsRef>,
    /// tc only on these interfaces.
    pub iface: Vec<String>,
    pub tc_mode: TcMode,
    pub ring_bytes: u32,
    /// Keep the device tracepoints where tc covers every interface.
    pub device_tracepoints: bool,
    /// The kernel programs log why packets are (not) followed (aya-log,
    /// target `tracer_ebpf`, level debug).
    pub debug_bpf: bool,
    /// Bytes of each followed packet the kernel side copies (kind BYTES
    /// records), from the IP header on; 0: none.
    pub snaplen: u16,
    /// A DNS port besides 53 whose UDP packets carry their DNS id.
    pub dns_port: Option<u16>,
    /// The node's VXLAN ports beyond the overlays' own, when already read
    /// ([`node_tunnel_ports`]); None: read at start.
    pub tunnel_ports: Option<[u16; 2]>,
}

/// What start-up found, for the operator.
#[derive(Debug)]
pub struct StartReport {
    /// Problems worth a warning line (tc errors, ...).
    pub warnings: Vec<String>,
    /// The node's VXLAN ports beyond the overlay ports every tracer knows,
    /// which the skb programs follow packets into
    /// (`FilterConfig::tunnel_ports`).
    pub tunnel_ports: [u16; 2],
}

pub struct Session {
    // Fields drop in order: tc links and filters first, then the ring
    // buffer, then the programs and maps.
    tc: TcManager,
    ring: AsyncFd<RingBuf<MapData>>,
    ebpf: aya::Ebpf,
    plan: Vec<probes::ProbeStatus>,
    caps: probes::KernelCaps,
    last_sync: Instant,
    /// When the loaded programs were last asked whether a hook left out
    /// at start is needed now ([`Session::attach_needed`]).
    needs_asked: Instant,
    /// The kernel programs' debug log (`--debug-bpf`).
    bpf_log: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
}

/// The kernel's name tables and symbols, read while the session starts.
pub struct KernelNames {
    pub drop_reasons: HashMap<u32, String>,
    /// skb:kfree_skb has no reason on this kernel (before 5.17).
    pub no_drop_reason: bool,
    pub rst_reasons: HashMap<u32, String>,
    pub kallsyms: Kallsyms,
}

impl KernelNames {
    pub fn into_names(self) -> Names {
        Names {
            drop_reasons: self.drop_reasons,
            no_drop_reason: self.no_drop_reason,
            icmp_unhooked: false,
            rst_reasons: self.rst_reasons,
            kallsyms: self.kallsyms,
            netns: Default::default(),
            interned: Default::default(),
        }
    }
}

/// Teardown figures.
#[derive(Debug, Clone)]
pub struct Teardown {
    pub counters: Counters,
    pub tc_mode: TcMode,
    pub tc_interfaces: usize,
    pub detach_ms: u128,
    pub errors: Vec<String>,
}

/// How often [`Session::maintain`] runs (with the 250 ms tick: every
/// second tick). In netlink mode it is what hooks a pod created after the
/// start: a new interface waits at most this plus a tick (it was 1 s, at
/// the limit of issue 16's "hooked within a second"). tcx mode has its
/// attacher thread's own 200 ms listing.
const MAINTAIN_EVERY: Duration = Duration::from_millis(500);

/// How often the loaded programs are asked whether a hook left out at
/// start is needed now ([`Session::attach_needed`]): one walk of the
/// node's BPF programs (four bpf(2) calls each).
const NEEDS_EVERY: Duration = Duration::from_secs(2);

/// The most records one [`Session::drain`] hands over before it returns
/// to the event loop (a few ms of work; the loop drains again at once
/// while the ring stays readable).
const DRAIN_MAX: usize = 16_384;

/// What the kernel programs match and read ([`tracer_common::FilterConfig`]).
fn filter_config(opts: &SessionOptions, needs: probes::NodeNeeds) -> tracer_common::FilterConfig {
    let mut filter = opts.target.filter(!opts.netns.is_empty());
    filter.snaplen = opts.snaplen;
    filter.dns_port = opts.dns_port.unwrap_or(0);
    // Where a tunnel driver is loaded.
    if needs.tunnel_drivers {
        filter.tunnel_ports = opts.tunnel_ports.unwrap_or_else(|| node_tunnel_ports(opts));
    }
    filter
}

/// The node's VXLAN devices' ports beyond the overlay ports every
/// tracer knows: in tracer's own namespace, the traced ones and the named
/// ones (at most [`TUNNEL_PORT_NETNS_MAX`] of those: a dump each).
pub fn node_tunnel_ports(opts: &SessionOptions) -> [u16; 2] {
    let mut out = [0; 2];
    let mut paths: Vec<PathBuf> = opts.netns.iter().map(|n| n.path.clone()).collect();
    for (_, p) in crate::node::netns::named() {
        if paths.len() >= TUNNEL_PORT_NETNS_MAX {
            break;
        }
        if !paths.contains(&p) {
            paths.push(p);
        }
    }
    let ports = crate::node::link::extra_tunnel_ports::<2>(&paths);
    log::debug!("tunnel ports beyond the overlays' own: {ports:?}");
    out[..ports.len()].copy_from_slice(&ports);
    out
}

/// Namespaces read for VXLAN ports at start ([`node_tunnel_ports`]).
const TUNNEL_PORT_NETNS_MAX: usize = 256;

impl Session {
    /// Parse BTF, load and attach every program, put tc on the interfaces
    /// in scope. Errors after the first attachment detach what was made
    /// (the fields' `Drop`).
    pub fn start(
        opts: &SessionOptions,
        started: Instant,
    ) -> Result<(Session, KernelNames, StartReport), SessionError> {
        let vmlinux = crate::kernel::btf::vmlinux_path();
        if !vmlinux.exists() {
            return Err(SessionError::NoBtf { path: vmlinux });
        }
        // /proc/kallsyms takes ~50 ms to read: off the start-up path. One
        // read serves both: the registry's symbols first (needed for the
        // plan), then the table that names drop locations.
        let (caps_tx, caps_rx) = std::sync::mpsc::channel();
        let kallsyms = std::thread::spawn(move || {
            let table = Kallsyms::read_proc();
            let _ = caps_tx.send(probes::KernelCaps::probe_with(&table));
            table
        });
        let btf = Btf::from_sys()?;
        log::debug!("btf parsed: {:?}", started.elapsed());
        btf.prefetch(start_names().iter().map(String::as_str));
        let resolved = offsets::resolve(&btf)?;
        let drop_reasons = offsets::enum_names(&btf, "skb_drop_reason", "SKB_DROP_REASON_");
        let rst_reasons = offsets::enum_names(&btf, "sk_rst_reason", "SK_RST_REASON_");
        log::debug!("offsets resolved: {:?}", started.elapsed());
        let mut caps = caps_rx.recv().unwrap_or_default();
        log::debug!("kallsyms read: {:?}", started.elapsed());
        let mut plan = probes::plan(&btf, &caps);
        let needs = probes::NodeNeeds::read();
        probes::skip_unneeded(&mut plan, needs);
        drop(btf);
        // Module BTF parses into many small blocks, which glibc keeps
        // resident once freed: hand them back before aya parses vmlinux BTF.
        trim_heap();
        log::debug!("names ready: {:?}", started.elapsed());

        let filter = filter_config(opts, needs);
        let inodes: Vec<u32> = opts.netns.iter().map(|n| n.inode).collect();
        // One parse for the object's load and the programs' (loader::load).
        let aya_btf = aya::Btf::parse_file(&vmlinux, aya::Endianness::default())
            .map_err(SessionError::ProgramBtf)?;
        log::debug!("btf parsed for the load: {:?}", started.elapsed());
        let mut ebpf = loader::load(
            &filter,
            &resolved.offsets,
            &inodes,
            &aya_btf,
            opts.ring_bytes,
            opts.debug_bpf,
        )?;
        let bpf_log = bpf_logger(&mut ebpf, opts.debug_bpf)?;
        // tc on every interface of every traced namespace sees what the
        // device tracepoints would (probes::TC_COVERED); without --netns it
        // is on the host's interfaces only, and the tracepoints cover the
        // pods. Decided before the load: a hook left to tc is loaded only
        // if tc fails somewhere (give_back_to_tracepoints).
        if !opts.netns.is_empty() && opts.iface.is_empty() && !opts.device_tracepoints {
            probes::leave_to_tc(&mut plan, needs);
        }
        log::debug!("maps created: {:?}", started.elapsed());
        loader::load_programs(&mut ebpf, &mut plan, &mut caps, &aya_btf)?;
        log::debug!("object loaded: {:?}", started.elapsed());

        let scopes: Vec<TcScope> = if opts.netns.is_empty() {
            vec![TcScope {
                netns: None,
                keep: None,
                label: "host".into(),
            }]
        } else {
            opts.netns
                .iter()
                .map(|n| TcScope {
                    netns: Some(n.path.clone()),
                    keep: Some(n.fd.clone()),
                    label: n.label.clone(),
                })
                .collect()
        };
        let mut tc = TcManager::new(opts.tc_mode, scopes, opts.iface.clone());
        // Held for the whole run: `tracer cleanup` leaves this tracer's
        // filters and qdiscs alone while it lives.
        let mut lock_warning = None;
        match TracerLock::acquire(&tc_prog_ids(&ebpf)) {
            Ok(lock) => tc.set_lock(lock),
            Err(e) => {
                lock_warning = Some(format!(
                    "cannot hold {}/PID.lock ({e}): `tracer cleanup` run meanwhile would take this tracer's tc filters for leftovers",
                    crate::kernel::tracer_lock::LOCK_DIR
                ));
            }
        }
        // From here on, every error path detaches (TcManager's Drop, links'
        // Drop) before returning.
        loader::attach_hooks(&mut ebpf, &mut plan, &caps, &aya_btf)?;
        drop(aya_btf);
        // Both parses of vmlinux BTF (~6 MiB each, in many small blocks)
        // are freed; hand the pages back so that they do not stay in RSS
        // for the whole run (glibc keeps freed heap otherwise).
        trim_heap();
        log::debug!("hooks attached: {:?}", started.elapsed());
        tc.sync(&mut ebpf)?;
        let mut warnings = give_back_to_tracepoints(&mut ebpf, &mut plan, &caps, &tc, &vmlinux);
        log::debug!("tc attached: {:?}", started.elapsed());
        let missing = tc.missing_ifaces();
        if !missing.is_empty() {
            tc.detach_all();
            return Err(SessionError::MissingIfaces(missing.join(", ")));
        }
        // SAFETY: the RingBuf owns its map fd, which stays open and the
        // same for as long as the AsyncFd (which owns the RingBuf) lives.
        let ring = unsafe {
            AsyncFd::register_with_interest(loader::ring(&mut ebpf)?, tokio::io::Interest::READABLE)
        }
        .map_err(|e| SessionError::RingRegister(e.into()))?;
        warnings.extend(tc.errors.iter().cloned());
        warnings.extend(lock_warning);
        let names = KernelNames {
            drop_reasons,
            no_drop_reason: resolved.offsets.tp_kfree_has_reason == 0,
            rst_reasons,
            kallsyms: kallsyms.join().unwrap_or_default(),
        };
        let session = Session {
            tc,
            ring,
            ebpf,
            plan,
            caps,
            last_sync: Instant::now(),
            needs_asked: Instant::now(),
            bpf_log,
        };
        log::debug!("session started: {:?}", started.elapsed());
        let report = StartReport {
            warnings,
            tunnel_ports: filter.tunnel_ports,
        };
        Ok((session, names, report))
    }

    pub fn plan(&self) -> &[probes::ProbeStatus] {
        &self.plan
    }

    pub fn tc_mode(&self) -> TcMode {
        self.tc.mode()
    }

    /// Interfaces still being hooked in the background (a large node
    /// without --netns/--iface: loader/tc.rs).
    pub fn tc_pending(&self) -> bool {
        self.tc.pending()
    }

    pub fn tc_interfaces(&self) -> usize {
        self.tc.attached_count()
    }

    /// Wait until the kernel wakes us (WAKE_BYTES waiting, emit.rs); the
    /// caller then drains. Readiness is cleared before the drain, so a
    /// record that arrives during it wakes us again.
    pub async fn readable(&mut self) -> Result<(), SessionError> {
        let mut guard = self
            .ring
            .readable_mut()
            .await
            .map_err(SessionError::RingWait)?;
        guard.clear_ready();
        Ok(())
    }

    /// Hand the records waiting now to `each` (below the wake-up
    /// threshold the kernel does not wake us), at most [`DRAIN_MAX`]: a
    /// flood of followed packets (a storm, or a guest whose reader is
    /// slower than its programs) must not keep the event loop in here,
    /// where no stop signal or tick is seen (a 5.10 guest's tracer was
    /// still draining 150 s after its stop). The loop comes back while the
    /// ring stays readable.
    pub fn drain(&mut self, each: &mut dyn FnMut(&[u8])) {
        if let Some(l) = self.bpf_log.as_mut() {
            l.flush();
        }
        read_ring(&mut self.ring, DRAIN_MAX, each);
    }

    /// Every [`MAINTAIN_EVERY`]: hook interfaces that appeared, and attach
    /// the device tracepoints after all where tc failed. `None` when not
    /// due yet, else the warnings.
    pub fn maintain(&mut self) -> Option<Vec<String>> {
        if self.last_sync.elapsed() < MAINTAIN_EVERY {
            return None;
        }
        self.last_sync = Instant::now();
        let mut warnings = Vec::new();
        if let Err(e) = self.tc.sync(&mut self.ebpf) {
            warnings.push(format!("interface rescan: {e}"));
        }
        warnings.extend(give_back_to_tracepoints(
            &mut self.ebpf,
            &mut self.plan,
            &self.caps,
            &self.tc,
            &crate::kernel::btf::vmlinux_path(),
        ));
        Some(warnings)
    }

    /// Every [`NEEDS_EVERY`] while a hook is parked (left out at start as
    /// not needed): a dataplane that loaded an XDP or cgroup
    /// socket-address program since gets the hooks that see what it does
    /// (a Cilium agent that starts, or restarts, after tracer). Some when
    /// hooks were attached: what was found and the hooks, and the errors
    /// of those that failed.
    pub fn attach_needed(&mut self) -> Option<(String, Vec<String>)> {
        if self.needs_asked.elapsed() < NEEDS_EVERY || !probes::any_parked(&self.plan) {
            return None;
        }
        self.needs_asked = Instant::now();
        let needs = probes::NodeNeeds::programs();
        let hooks = probes::now_needed(&mut self.plan, needs);
        if hooks.is_empty() {
            return None;
        }
        let what = match (needs.xdp_programs, needs.sock_addr) {
            (true, true) => "XDP and cgroup socket-address programs were",
            (true, false) => "an XDP program was",
            _ => "a cgroup socket-address program was",
        };
        let said = format!(
            "{what} loaded on this node after the start: attaching {}",
            hooks.join(", ")
        );
        let errors = attach_late(
            &mut self.ebpf,
            &mut self.plan,
            &self.caps,
            &hooks,
            &crate::kernel::btf::vmlinux_path(),
        );
        Some((said, errors))
    }

    /// What the programs leave out from now on (`tracer_common::shed`
    /// bits, the `SHED` array): over the CPU budget (run/budget.rs).
    pub fn set_shed(&mut self, bits: u32) -> Result<(), SessionError> {
        let map = self.ebpf.map_mut("SHED").ok_or(SessionError::Map {
            map: "SHED",
            err: aya::maps::MapError::InvalidName {
                name: "SHED".into(),
            },
        })?;
        let mut arr = aya::maps::Array::<&mut aya::maps::MapData, u32>::try_from(map)
            .map_err(|err| SessionError::Map { map: "SHED", err })?;
        arr.set(0, bits, 0)
            .map_err(|err| SessionError::Map { map: "SHED", err })
    }

    /// The kernel-side counters summed over CPUs.
    pub fn counters(&self) -> Counters {
        counters(&self.ebpf)
    }

    /// The packets the kernel counted instead of recording (the `AGG` map,
    /// tracer_common::agg), as `(key, total, netns)`: running totals per
    /// key summed over CPUs, plus what each CPU's per-hook slot
    /// (`AGG_HOT`) holds pending for its key. A key with a total of 0 is
    /// returned only when `knows` it (counted.rs).
    pub fn counted_totals(
        &self,
        knows: &dyn Fn(&AggKey) -> bool,
    ) -> Result<Vec<(AggKey, u64, u32)>, SessionError> {
        let Some(map) = self.ebpf.map("AGG") else {
            return Ok(Vec::new());
        };
        let map = PerCpuHashMap::<&MapData, AggKey, AggVal>::try_from(map)
            .map_err(|err| SessionError::Map { map: "AGG", err })?;
        let mut seen: HashMap<AggKey, (u64, u32)> = HashMap::new();
        // A key can be evicted while we iterate: skip the error, not the rest.
        for (k, vals) in map.iter().flatten() {
            let total: u64 = vals.iter().map(|v| v.packets).sum();
            // Most keys never counted a packet (their flows stayed within
            // the record budget): with many short flows the map is full of
            // them (16384 keys), and keeping them all cost ~6 MiB each poll.
            if total == 0 && !knows(&k) {
                continue;
            }
            let netns = vals.iter().map(|v| v.netns).find(|n| *n != 0).unwrap_or(0);
            seen.insert(k, (total, netns));
        }
        // Read after AGG: a count moving from a slot to AGG meanwhile is
        // missed this once (a short read), never counted twice.
        if let Some(hot) = self.ebpf.map("AGG_HOT") {
            let hot_err = |err| SessionError::Map {
                map: "AGG_HOT",
                err,
            };
            let hot = PerCpuArray::<&MapData, AggHot>::try_from(hot).map_err(hot_err)?;
            for i in 0..AGG_HOT_SLOTS {
                for h in hot.get(&i, 0).map_err(hot_err)?.iter() {
                    if h.until != 0 && h.pending != 0 {
                        seen.entry(h.key).or_insert((0, 0)).0 += h.pending;
                    }
                }
            }
        }
        Ok(seen.into_iter().map(|(k, (t, n))| (k, t, n)).collect())
    }

    /// Detach everything now, and say how long it took; then hand the
    /// records still in the ring to `each` (nothing adds to it once the
    /// programs are gone).
    pub fn finish(self, each: &mut dyn FnMut(&[u8])) -> Teardown {
        let started = Instant::now();
        let counters = self.counters();
        let Session {
            mut tc,
            mut ring,
            ebpf,
            ..
        } = self;
        let tc_mode = tc.mode();
        let tc_interfaces = tc.attached_count();
        let errors = tc.detach_all();
        drop(tc);
        drop(ebpf);
        read_ring(&mut ring, usize::MAX, each);
        drop(ring);
        Teardown {
            counters,
            tc_mode,
            tc_interfaces,
            detach_ms: started.elapsed().as_millis(),
            errors,
        }
    }
}

/// Hand at most `limit` records of the ring to `each`.
fn read_ring(ring: &mut AsyncFd<RingBuf<MapData>>, limit: usize, each: &mut dyn FnMut(&[u8])) {
    let rb = ring.get_mut();
    for _ in 0..limit {
        let Some(item) = rb.next() else {
            return;
        };
        each(&item);
    }
}

/// The BTF names the start looks up (offsets, enum names, the hook plan),
/// found in one pass ([`Btf::prefetch`]).
fn start_names() -> Vec<String> {
    offsets::NAMES
        .iter()
        .map(|n| (*n).to_string())
        .chain(probes::btf_names())
        .collect()
}

/// The ids of the loaded tc programs (what a lock file names: a netlink
/// filter running one of them is this tracer's).
fn tc_prog_ids(ebpf: &aya::Ebpf) -> Vec<u32> {
    [loader::tc::INGRESS_PROG, loader::tc::EGRESS_PROG]
        .iter()
        .filter_map(|name| {
            let p: &aya::programs::SchedClassifier = ebpf.program(name)?.try_into().ok()?;
            Some(p.info().ok()?.id())
        })
        .collect()
}

/// The kernel programs' debug log, with `--debug-bpf`.
fn bpf_logger(
    ebpf: &mut aya::Ebpf,
    debug: bool,
) -> Result<Option<aya_log::EbpfLogger<&'static dyn log::Log>>, SessionError> {
    debug
        .then(|| aya_log::EbpfLogger::init(ebpf).map_err(SessionError::BpfLog))
        .transpose()
}

/// When tc failed on an interface, the device tracepoints left to it are
/// attached after all: that interface's packets would otherwise have no
/// device hop. Once given back, `tc_failed` returns nothing more.
fn give_back_to_tracepoints(
    ebpf: &mut aya::Ebpf,
    plan: &mut [probes::ProbeStatus],
    caps: &probes::KernelCaps,
    tc: &TcManager,
    vmlinux: &std::path::Path,
) -> Vec<String> {
    if tc.errors.is_empty() {
        return Vec::new();
    }
    let hooks = probes::tc_failed(plan);
    if hooks.is_empty() {
        return Vec::new();
    }
    let mut w = vec![format!(
        "tc is not on every interface: attaching {} after all",
        hooks.join(", ")
    )];
    w.extend(attach_late(ebpf, plan, caps, &hooks, vmlinux));
    w
}

/// Load and attach `hooks` while tracing (given back by tc, or needed
/// since the start): their programs were not loaded at start
/// (load_programs), so BTF is parsed again, once, and its pages handed
/// back after. The errors, each a line.
fn attach_late(
    ebpf: &mut aya::Ebpf,
    plan: &mut [probes::ProbeStatus],
    caps: &probes::KernelCaps,
    hooks: &[String],
    vmlinux: &std::path::Path,
) -> Vec<String> {
    let errors = match aya::Btf::parse_file(vmlinux, aya::Endianness::default()) {
        Ok(btf) => loader::attach_left(ebpf, plan, caps, hooks, &btf),
        Err(e) => vec![format!("cannot attach {}: BTF: {e}", hooks.join(", "))],
    };
    trim_heap();
    errors
}

/// Give freed heap pages back to the system (glibc keeps them otherwise).
pub fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On this machine's kernel, the start's lookups are all answered by
    /// the one prefetch pass: a name the offsets or the plan asks for
    /// that `start_names` lacks costs a pass over vmlinux of its own.
    #[test]
    fn running_kernel_start_names_are_prefetched() {
        let Ok(btf) = Btf::from_sys() else {
            eprintln!("!!!!! SKIPPED: no /sys/kernel/btf/vmlinux here !!!!!");
            return;
        };
        btf.prefetch(start_names().iter().map(String::as_str));
        assert_eq!(btf.scans(), 0);
        let _ = offsets::resolve(&btf);
        let _ = offsets::enum_names(&btf, "skb_drop_reason", "SKB_DROP_REASON_");
        let _ = offsets::enum_names(&btf, "sk_rst_reason", "SK_RST_REASON_");
        let caps = probes::KernelCaps {
            kprobes: true,
            ..Default::default()
        };
        let _ = probes::plan(&btf, &caps);
        assert_eq!(btf.scans(), 0, "names looked up one pass each");
    }
}
