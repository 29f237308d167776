//! `tracer follow`: attach, follow, print verdicts, detach.

use std::{
    collections::{BTreeMap, HashMap},
    io::stdout,
    path::PathBuf,
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{SignalKind, signal},
};

use super::{Output, TcAttach, check_privileges, parse_duration};
use crate::{
    btf::{Btf, offsets},
    counted::Counted,
    event::decode,
    flow::FlowTable,
    loader::{
        self, counters, probes,
        tc::{TcManager, TcMode, TcScope},
    },
    names::{Kallsyms, Names},
    netfilter::{self, NfRule},
    netns::{addresses_in, resolve_netns},
    render::{self, Format, Summary, emit},
    target::Target,
    verdict::{Completeness, Env, IfAddr, Verdict, evaluate},
    vip::VipWatch,
};

#[derive(Debug, Args)]
pub struct FollowArgs {
    /// ADDR, ADDR:PORT, [IPv6]:PORT or CIDR to follow (e.g. 169.254.25.10:53).
    pub target: String,
    /// Only this protocol.
    #[arg(long, value_parser = ["tcp", "udp", "icmp"])]
    pub proto: Option<String>,
    /// Follow and hook only these namespaces (name under /run/netns, path, or PID). Repeatable.
    #[arg(long)]
    pub netns: Vec<String>,
    /// Hook tc only on these interfaces. Repeatable.
    #[arg(long)]
    pub iface: Vec<String>,
    /// Stop after this long (e.g. 30s, 2m).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop after this many flows reached a verdict.
    #[arg(long)]
    pub count: Option<u64>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Create this file once every probe is attached.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// How tc programs are attached.
    #[arg(long, value_enum, default_value_t = TcAttach::Auto)]
    pub tc_attach: TcAttach,
    /// Most flows kept; the quietest is evicted (and counted) beyond.
    #[arg(long, default_value_t = 10_000)]
    pub max_flows: usize,
    /// Kernel-to-user ring buffer size in bytes (a power of two, >= 4096).
    /// Events that do not fit are counted as lost and the verdicts marked
    /// incomplete.
    #[arg(long, default_value_t = tracer_common::RING_BYTES, value_parser = parse_ring_bytes)]
    pub ring_bytes: u32,
    /// Attach the netif_receive_skb and net_dev_start_xmit tracepoints even
    /// where tc already sees every packet (`--netns` without `--iface`):
    /// two more programs on every packet of the node, for a hop after the
    /// qdisc and one before generic XDP.
    #[arg(long)]
    pub device_tracepoints: bool,
}

fn parse_ring_bytes(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("bad ring size '{s}': a number of bytes"))?;
    if n < 4096 || !n.is_power_of_two() {
        return Err(format!(
            "ring size {n} must be a power of two of at least 4096"
        ));
    }
    Ok(n)
}

/// What the verdict rules may look up on the node, per namespace, read on
/// demand: addresses and the IPVS table (in-process reads, refreshed when
/// older than half a second), and netfilter counters, which take two
/// helper processes (iptables-save, ip6tables-save: seconds of CPU on a
/// node with a large ruleset), so only for a namespace where a followed
/// packet was dropped by netfilter, and at most every [`NF_REFRESH`].
struct NetnsFacts {
    at: Instant,
    addrs: Vec<IfAddr>,
    ipvs: Vec<crate::ipvs::VirtualService>,
    /// When read, and the DROP/REJECT rules whose counters moved.
    nf: Option<(Instant, Vec<(NfRule, u64)>)>,
}

/// How often netfilter counters of a namespace are read again while
/// tracing (the final report always reads them afresh).
const NF_REFRESH: Duration = Duration::from_secs(2);

struct LiveEnv {
    vip: VipWatch,
    cache: HashMap<u32, NetnsFacts>,
    paths: HashMap<u32, PathBuf>,
    tc: std::cell::RefCell<HashMap<(u32, String), Vec<String>>>,
    /// Netfilter counters when tracing started, per namespace inode.
    nf_baseline: HashMap<u32, Vec<NfRule>>,
}

/// The namespaces a flow's verdict may look up: every hop's, each with
/// whether its netfilter counters are wanted (a NETFILTER_DROP there).
fn facts_wanted(f: &crate::flow::Flow) -> impl Iterator<Item = (u32, bool)> + '_ {
    f.hops.iter().map(|h| {
        let nf = matches!(&h.data, crate::hop::HopData::Drop(d) if d.reason.as_str() == "NETFILTER_DROP");
        (h.netns_inode, nf)
    })
}

impl LiveEnv {
    fn prepare(&mut self, names: &mut Names, wanted: impl Iterator<Item = (u32, bool)>) {
        for (ino, want_nf) in wanted {
            if ino == 0 {
                continue;
            }
            let cached = self.cache.get(&ino);
            let stale = cached.is_none_or(|f| f.at.elapsed() >= Duration::from_millis(500));
            let nf_due = want_nf
                && cached
                    .and_then(|f| f.nf.as_ref())
                    .is_none_or(|(t, _)| t.elapsed() >= NF_REFRESH);
            // Every hop of every idle flow comes here each tick: the path
            // (a scan of /run/netns for an unknown inode) only when
            // something is to be read.
            if !stale && !nf_due {
                continue;
            }
            let path = names.netns.path(ino);
            if let Some(p) = &path {
                self.paths.insert(ino, p.clone());
            }
            if stale {
                let (addrs, ipvs) = match &path {
                    Some(p) => (
                        addresses_in(p).unwrap_or_default(),
                        crate::ipvs::table_in(p),
                    ),
                    None => (Vec::new(), Vec::new()),
                };
                let nf = self.cache.remove(&ino).and_then(|f| f.nf);
                self.cache.insert(
                    ino,
                    NetnsFacts {
                        at: Instant::now(),
                        addrs,
                        ipvs,
                        nf,
                    },
                );
            }
            if nf_due
                && let Some(p) = &path
                && let Some(facts) = self.cache.get_mut(&ino)
            {
                let now = netfilter::snapshot(p);
                let moved = netfilter::moved(self.nf_baseline.get(&ino).map(Vec::as_slice), &now);
                facts.nf = Some((Instant::now(), moved));
            }
        }
    }

    /// Force a re-read (for the final report).
    fn expire(&mut self) {
        self.cache.clear();
        self.tc.borrow_mut().clear();
    }
}

impl Env for LiveEnv {
    fn addrs(&self, netns: u32) -> Option<&[IfAddr]> {
        self.cache
            .get(&netns)
            .map(|f| f.addrs.as_slice())
            .filter(|a| !a.is_empty())
    }

    fn nf_moved(&self, netns: u32) -> &[(NfRule, u64)] {
        self.cache
            .get(&netns)
            .and_then(|f| f.nf.as_ref())
            .map(|(_, n)| n.as_slice())
            .unwrap_or(&[])
    }

    fn ipvs(&self, netns: u32) -> &[crate::ipvs::VirtualService] {
        self.cache
            .get(&netns)
            .map(|f| f.ipvs.as_slice())
            .unwrap_or(&[])
    }

    fn dst_facts(&self, dst: std::net::IpAddr) -> Vec<crate::verdict::Evidence> {
        self.vip.evidence(dst)
    }

    fn tc_filters(&self, netns: u32, dev: &str) -> Vec<String> {
        let key = (netns, dev.to_string());
        if let Some(v) = self.tc.borrow().get(&key) {
            return v.clone();
        }
        let v = self
            .paths
            .get(&netns)
            .map(|p| netfilter::tc_ingress_filters(p, dev))
            .unwrap_or_default();
        self.tc.borrow_mut().insert(key, v.clone());
        v
    }
}

/// Namespaces whose addresses are watched for the target: the traced ones,
/// or by default tracer's own and every named one.
fn watched_netns(netns: &[crate::netns::NetnsRef]) -> Vec<(String, PathBuf)> {
    if !netns.is_empty() {
        return netns
            .iter()
            .map(|n| (n.label.clone(), n.path.clone()))
            .collect();
    }
    let mut v = vec![("host".to_string(), PathBuf::from("/proc/self/ns/net"))];
    if let Ok(rd) = std::fs::read_dir("/run/netns") {
        v.extend(
            rd.flatten()
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path())),
        );
    }
    v
}

/// Read every record waiting in the ring buffer into the flow table, then
/// pack the flows that went quiet; returns how many records could not be
/// decoded.
fn drain(
    rb: &mut aya::maps::RingBuf<aya::maps::MapData>,
    target: &Target,
    vip: &mut VipWatch,
    flows: &mut FlowTable,
    names: &mut Names,
) -> u64 {
    let bad = read_ring(rb, target, vip, flows, names);
    // Flows quiet for FlowTable's PACK_NS are packed (frozen.rs): with
    // 100k flows, that is what keeps the table within 64 MiB.
    flows.pack_quiet(now_ns());
    bad
}

/// [`drain`] without the packing: for the last read before the final
/// report, which unpacks every flow again.
fn read_ring(
    rb: &mut aya::maps::RingBuf<aya::maps::MapData>,
    target: &Target,
    vip: &mut VipWatch,
    flows: &mut FlowTable,
    names: &mut Names,
) -> u64 {
    let mut bad = 0;
    while let Some(item) = rb.next() {
        match decode(&item) {
            Ok(ev) => {
                note_neighbour(&ev, target, vip);
                flows.ingest(&ev, names);
            }
            Err(e) => {
                bad += 1;
                log::debug!("undecodable record: {e}");
            }
        }
    }
    bad
}

/// A neighbour entry for the target got a link-layer address: remember it.
fn note_neighbour(ev: &crate::event::Event, target: &Target, vip: &mut VipWatch) {
    if let crate::event::Event::Neigh(n) = ev {
        let addr = crate::event::ip_from(n.family, &n.addr);
        if target.contains(addr) && n.lladdr[..6].iter().any(|b| *b != 0) {
            let mac: Vec<String> = n.lladdr[..6].iter().map(|b| format!("{b:02x}")).collect();
            vip.note_mac(addr, &mac.join(":"));
        }
    }
}

/// Netfilter counters of every namespace we can name, before tracing.
fn nf_baseline(extra: Vec<std::path::PathBuf>) -> HashMap<u32, Vec<NfRule>> {
    let mut paths = extra;
    paths.push("/proc/self/ns/net".into());
    if let Ok(rd) = std::fs::read_dir("/run/netns") {
        paths.extend(rd.flatten().map(|e| e.path()));
    }
    paths
        .into_iter()
        .filter_map(|p| Some((crate::names::netns_inode(&p)?, netfilter::snapshot(&p))))
        .collect()
}

fn tc_mode(choice: TcAttach) -> TcMode {
    match choice {
        TcAttach::Tcx => TcMode::Tcx,
        TcAttach::Netlink => TcMode::Netlink,
        TcAttach::Auto => {
            // tcx links exist since Linux 6.6 (bpf_mprog).
            let v = aya::util::KernelVersion::current().ok();
            if v.is_some_and(|v| v >= aya::util::KernelVersion::new(6, 6, 0)) {
                TcMode::Tcx
            } else {
                TcMode::Netlink
            }
        }
    }
}

pub fn run(args: FollowArgs) -> Result<ExitCode> {
    let target = Target::parse(&args.target, args.proto.as_deref())?;
    let netns: Vec<_> = args
        .netns
        .iter()
        .map(|s| resolve_netns(s))
        .collect::<Result<_>>()?;
    check_privileges()?;
    let vmlinux = crate::btf::vmlinux_path();
    if !vmlinux.exists() {
        bail!(
            "this kernel exposes no BTF ({} missing): tracer needs a kernel built with CONFIG_DEBUG_INFO_BTF=y",
            vmlinux.display()
        );
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start runtime")?
        .block_on(follow(args, target, netns))
}

async fn follow(
    args: FollowArgs,
    target: Target,
    netns: Vec<crate::netns::NetnsRef>,
) -> Result<ExitCode> {
    let started = Instant::now();
    // Signals first: a Ctrl-C during attach is handled after it, with cleanup.
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;

    // /proc/kallsyms takes ~50 ms to read: off the start-up path, as is the
    // netfilter counter baseline (joined before the ready file is written).
    // One read serves both: the registry's symbols first (needed for the
    // plan), then the table that names drop locations.
    let (caps_tx, caps_rx) = std::sync::mpsc::channel();
    let kallsyms = std::thread::spawn(move || {
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        let _ = caps_tx.send(probes::KernelCaps::probe_with(&text));
        Kallsyms::parse(&text)
    });
    let netns_paths: Vec<_> = netns.iter().map(|n| n.path.clone()).collect();
    let baseline = std::thread::spawn(move || nf_baseline(netns_paths));
    let btf = Btf::from_sys()?;
    log::debug!("btf parsed: {:?}", started.elapsed());
    let resolved = offsets::resolve(&btf)?;
    let mut names = Names {
        drop_reasons: offsets::enum_names(&btf, "skb_drop_reason", "SKB_DROP_REASON_"),
        rst_reasons: offsets::enum_names(&btf, "sk_rst_reason", "SK_RST_REASON_"),
        kallsyms: Kallsyms::default(),
        netns: Default::default(),
        interned: Default::default(),
    };
    let mut caps = caps_rx.recv().unwrap_or_default();
    let mut plan = probes::plan(&btf, &caps);
    drop(btf);
    log::debug!("names ready: {:?}", started.elapsed());

    let filter = target.filter(!netns.is_empty());
    let inodes: Vec<u32> = netns.iter().map(|n| n.inode).collect();
    let aya_btf = aya::Btf::parse_file(crate::btf::vmlinux_path(), aya::Endianness::default())
        .context("read kernel BTF for program loading")?;
    let mut ebpf = loader::load(
        &filter,
        &resolved.offsets,
        &inodes,
        &aya_btf,
        args.ring_bytes,
    )?;
    loader::load_programs(&mut ebpf, &mut plan, &mut caps, &aya_btf)?;
    log::debug!("object loaded: {:?}", started.elapsed());

    let scopes: Vec<TcScope> = if netns.is_empty() {
        vec![TcScope {
            netns: None,
            label: "host".into(),
        }]
    } else {
        netns
            .iter()
            .map(|n| TcScope {
                netns: Some(n.path.clone()),
                label: n.label.clone(),
            })
            .collect()
    };
    let mut tc = TcManager::new(tc_mode(args.tc_attach), scopes, args.iface.clone());
    // tc on every interface of every traced namespace sees what the device
    // tracepoints would (probes::TC_COVERED); without --netns it is on the
    // host's interfaces only, and the tracepoints cover the pods.
    if !netns.is_empty() && args.iface.is_empty() && !args.device_tracepoints {
        probes::leave_to_tc(&mut plan);
    }
    // From here on, every error path detaches (TcManager's Drop, links'
    // Drop) before returning.
    loader::attach_hooks(&mut ebpf, &mut plan, &caps, &aya_btf)?;
    drop(aya_btf);
    // Both parses of vmlinux BTF (~6 MiB each, in many small blocks) are
    // freed; hand the pages back so that they do not stay in RSS for the
    // whole run (glibc keeps freed heap otherwise).
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
    log::debug!("hooks attached: {:?}", started.elapsed());
    tc.sync(&mut ebpf)?;
    give_back_to_tracepoints(&mut ebpf, &mut plan, &caps, &tc);
    log::debug!("tc attached: {:?}", started.elapsed());
    let missing = tc.missing_ifaces();
    if !missing.is_empty() {
        tc.detach_all();
        bail!(
            "interface(s) {} not found in the traced namespace(s)",
            missing.join(", ")
        );
    }
    // SAFETY: the RingBuf owns its map fd, which stays open and the same for
    // as long as the AsyncFd (which owns the RingBuf) lives.
    names.kallsyms = kallsyms.join().unwrap_or_default();
    let mut ring = unsafe {
        AsyncFd::register_with_interest(loader::ring(&mut ebpf)?, tokio::io::Interest::READABLE)
    }
    .map_err(|e| anyhow!("register ring buffer: {e}"))?;

    let format = match args.output {
        Output::Text => Format::Text,
        Output::Json => Format::Json,
    };
    let ready_ms = started.elapsed().as_millis();
    let attached = plan.iter().filter(|p| p.attached).count();
    eprintln!(
        "tracer: following {target}: {attached}/{} hooks, tc on {} interfaces ({:?}) in {} namespace(s), ready in {ready_ms} ms",
        plan.len(),
        tc.attached_count(),
        tc.mode(),
        netns.len().max(1),
    );
    eprintln!("tracer: backends: {}", probes::backend_summary(&plan));
    for p in plan.iter().filter(|p| p.missing() && p.core) {
        eprintln!(
            "tracer: warning: hook {} unavailable ({}): {}",
            p.hook,
            p.feeds,
            p.error.clone().unwrap_or_default()
        );
    }
    let gaps: Vec<&str> = plan
        .iter()
        .filter(|p| p.missing() && !p.core)
        .map(|p| p.hook.as_str())
        .collect();
    if !gaps.is_empty() {
        eprintln!(
            "tracer: note: function hooks unavailable here: {} (`tracer doctor` says why)",
            gaps.join(", ")
        );
    }
    for e in &tc.errors {
        eprintln!("tracer: warning: {e}");
    }
    if loader::empty_programs() {
        eprintln!(
            "tracer: warning: TRACER_EMPTY_PROGRAMS=1: every kernel program returns at once; \
             nothing is traced (a measure of the hooks' own cost)"
        );
    }
    let mut out = stdout();
    if format == Format::Json {
        for p in plan.iter().filter(|p| p.missing()) {
            emit(
                &mut out,
                &serde_json::json!({"type": "probe_error", "hook": p.hook, "core": p.core, "error": p.error})
                    .to_string(),
            );
        }
    }
    let nf_baseline = baseline.join().unwrap_or_default();
    let mut vip = VipWatch::new(watched_netns(&netns));
    vip.start(&target);
    if let Some(f) = &args.ready_file {
        std::fs::write(f, format!("{}\n", std::process::id()))
            .with_context(|| format!("write ready file {}", f.display()))?;
    }

    let completeness_base = Completeness {
        lost_events: 0,
        missing_hooks: plan
            .iter()
            .filter(|p| p.missing() && p.core)
            .map(|p| p.hook.clone())
            .collect(),
        missing_func_hooks: plan
            .iter()
            .filter(|p| p.missing() && !p.core)
            .map(|p| (p.hook.clone(), p.error.clone().unwrap_or_default()))
            .collect(),
        map_failures: 0,
    };
    let mut flows = FlowTable::new(args.max_flows);
    let mut env = LiveEnv {
        cache: HashMap::new(),
        paths: HashMap::new(),
        tc: Default::default(),
        nf_baseline,
        vip,
    };
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut drain_tick = tokio::time::interval(Duration::from_millis(10));
    drain_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_sync = Instant::now();
    let mut settled_count = 0u64;
    let mut vip_changes = 0usize;
    let mut decode_errors = 0u64;
    let mut counted = Counted::default();

    let stop_reason = loop {
        let sleep_deadline = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sigint.recv() => break "interrupted",
            _ = sigterm.recv() => break "terminated",
            _ = sleep_deadline => break "duration reached",
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                decode_errors += drain(guard.get_inner_mut(), &target, &mut env.vip, &mut flows, &mut names);
                guard.clear_ready();
            }
            // The kernel programs wake us only once WAKE_BYTES are waiting
            // (emit.rs); below that, records are read on this tick.
            _ = drain_tick.tick() => {
                decode_errors += drain(ring.get_mut(), &target, &mut env.vip, &mut flows, &mut names);
            }
            _ = tick.tick() => {
                env.vip.poll(&target, started.elapsed().as_millis() as u64);
                if last_sync.elapsed() >= Duration::from_secs(1) {
                    last_sync = Instant::now();
                    if let Err(e) = tc.sync(&mut ebpf) {
                        eprintln!("tracer: warning: interface rescan: {e:#}");
                    }
                    give_back_to_tracepoints(&mut ebpf, &mut plan, &caps, &tc);
                    if let Err(e) = counted.poll(&ebpf, &mut flows) {
                        eprintln!("tracer: warning: reading counted packets: {e:#}");
                    }
                    // Packing frees each quiet flow's hops, in blocks spread
                    // over the heap among live data; glibc returns whole free
                    // pages only when asked.
                    #[cfg(target_env = "gnu")]
                    // SAFETY: malloc_trim only releases free heap memory.
                    unsafe {
                        libc::malloc_trim(0);
                    }
                }
                let mut c = completeness_base.clone();
                let k = counters(&ebpf);
                c.lost_events = k.lost;
                c.map_failures = k.track_fail + k.flowkey_fail;
                let mut drain_more = |fl: &mut FlowTable, vip: &mut VipWatch, nm: &mut Names| {
                    decode_errors += drain(ring.get_mut(), &target, vip, fl, nm);
                };
                settled_count += print_settled(
                    &mut flows,
                    &mut env,
                    &mut names,
                    &c,
                    (format, &mut out),
                    &mut vip_changes,
                    &mut drain_more,
                );
                if args.count.is_some_and(|n| settled_count >= n) {
                    break "count reached";
                }
            }
        }
    };

    // Drain what is left, then detach before the (slower) final report.
    // As in the loop, neighbour MACs included: incident 1's second owner is
    // often among the last records.
    decode_errors += read_ring(
        ring.get_mut(),
        &target,
        &mut env.vip,
        &mut flows,
        &mut names,
    );
    // Owner changes since the last tick.
    env.vip.poll(&target, started.elapsed().as_millis() as u64);
    // Packets counted in the kernel since the last poll (the maps go with
    // the programs).
    if let Err(e) = counted.poll(&ebpf, &mut flows) {
        eprintln!("tracer: warning: reading counted packets: {e:#}");
    }
    let detach_started = Instant::now();
    let cnt = counters(&ebpf);
    let tc_mode = tc.mode();
    let tc_ifaces = tc.attached_count();
    let detach_errors = tc.detach_all();
    drop(tc);
    drop(ring);
    drop(ebpf);
    let detach_ms = detach_started.elapsed().as_millis();
    for e in &detach_errors {
        eprintln!("tracer: warning: detach: {e}");
    }
    if let Some(f) = &args.ready_file {
        let _ = std::fs::remove_file(f);
    }

    let c = Completeness {
        lost_events: cnt.lost,
        map_failures: cnt.track_fail + cnt.flowkey_fail,
        ..completeness_base
    };
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let evicted = flows.evicted;
    let flow_count = flows.len();
    let packed = flows.packed_size();
    env.expire();
    if format == Format::Text {
        emit(
            &mut out,
            &format!("==== {flow_count} flow(s) to {target} ({stop_reason}) ===="),
        );
    }
    // One flow unpacked at a time (FlowTable::into_flows).
    for f in flows.into_flows() {
        env.prepare(&mut names, facts_wanted(&f));
        let v = evaluate(&f, &env, &c);
        *tally.entry(v.kind.as_str().to_string()).or_default() += 1;
        print_flow(&f, &v, true, format, &mut out);
    }
    let traced: Vec<String> = if netns.is_empty() {
        vec!["all".into()]
    } else {
        netns.iter().map(|n| n.label.clone()).collect()
    };
    let summary = Summary {
        flows: flow_count,
        counters: cnt,
        counted: (counted.total, counted.unattributed),
        evicted,
        duration_ms: started.elapsed().as_millis() as u64,
        probes: &plan,
        tc: serde_json::json!({
            "mode": format!("{tc_mode:?}").to_lowercase(),
            "interfaces": tc_ifaces,
            "detach_ms": detach_ms,
            "ready_ms": ready_ms,
        }),
        verdicts: tally.into_iter().collect(),
        netns: traced,
        // Read after the final report, so it covers the whole run.
        peak_rss_kib: crate::procstat::self_status_kib("VmHWM:"),
    };
    match format {
        Format::Json => {
            let mut s = render::summary_json(&summary);
            s["stop"] = stop_reason.into();
            s["decode_errors"] = decode_errors.into();
            s["packed_flows"] = packed.0.into();
            s["packed_bytes"] = packed.1.into();
            s["vip"] = serde_json::json!({
                "owners": env.vip.owners(),
                "changes": env.vip.changes,
                "macs": env.vip.macs.iter().map(|(a, m)| serde_json::json!({"addr": a.to_string(), "mac": m})).collect::<Vec<_>>(),
            });
            emit(&mut out, &s.to_string());
        }
        Format::Text => {
            emit(&mut out, &render::summary_text(&summary));
            emit(
                &mut out,
                &format!(
                    "target owners now: {}; {} owner change(s) while tracing; MACs seen: {}",
                    if env.vip.owners().is_empty() {
                        "none in the traced namespaces".into()
                    } else {
                        env.vip.owners().join(", ")
                    },
                    env.vip.changes.len(),
                    env.vip
                        .macs
                        .iter()
                        .map(|(_, m)| m.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }
    eprintln!("tracer: stopped ({stop_reason}); detached in {detach_ms} ms");
    Ok(ExitCode::SUCCESS)
}

/// When tc failed on an interface, the device tracepoints left to it are
/// attached after all: that interface's packets would otherwise have no
/// device hop. Once given back, `tc_failed` returns nothing more.
fn give_back_to_tracepoints(
    ebpf: &mut aya::Ebpf,
    plan: &mut [probes::ProbeStatus],
    caps: &probes::KernelCaps,
    tc: &TcManager,
) {
    if tc.errors.is_empty() {
        return;
    }
    let hooks = probes::tc_failed(plan);
    if hooks.is_empty() {
        return;
    }
    eprintln!(
        "tracer: tc is not on every interface: attaching {} after all",
        hooks.join(", ")
    );
    for e in loader::attach_left(ebpf, plan, caps, &hooks) {
        eprintln!("tracer: warning: {e}");
    }
}

/// Flows quiet for 500 ms whose verdict is settled (or changed since last
/// printed) are printed as they are known. A printed flow with no hop since
/// is not judged again, unless the target's owner changed (`vip_changes`:
/// the count seen last time): with 100k flows, judging every quiet flow on
/// every tick kept the loop from the ring buffer and events were lost.
/// For the same reason the ring is drained (`drain_more`) between every
/// `DRAIN_EVERY` flows judged.
fn print_settled(
    flows: &mut FlowTable,
    env: &mut LiveEnv,
    names: &mut Names,
    c: &Completeness,
    (format, out): (Format, &mut std::io::Stdout),
    vip_changes: &mut usize,
    drain_more: &mut dyn FnMut(&mut FlowTable, &mut VipWatch, &mut Names),
) -> u64 {
    const DRAIN_EVERY: usize = 64;
    let now = now_ns();
    let recheck = env.vip.changes.len() != *vip_changes;
    *vip_changes = env.vip.changes.len();
    let mut ready: Vec<u64> = flows
        .metas()
        .filter(|f| now.saturating_sub(f.last_ns) > 500_000_000)
        .filter(|f| recheck || f.printed == 0 || f.printed_at != f.last_ns)
        .map(|f| f.id)
        .collect();
    ready.sort_unstable();
    let mut n = 0;
    for (i, id) in ready.into_iter().enumerate() {
        if i > 0 && i % DRAIN_EVERY == 0 {
            drain_more(flows, &mut env.vip, names);
        }
        let Some(f) = flows.get(id) else { continue };
        env.prepare(names, facts_wanted(&f));
        let v = evaluate(&f, env, c);
        if !v.settled {
            continue;
        }
        let key = verdict_key(&v);
        let first_time = f.printed == 0;
        if f.printed != key {
            print_flow(&f, &v, false, format, out);
            if first_time {
                n += 1;
            }
        }
        drop(f);
        flows.set_printed(id, key);
    }
    n
}

/// What a flow's printed verdict is compared on: (kind, reason), hashed;
/// never 0 (0 means "not printed").
fn verdict_key(v: &Verdict) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one((v.kind.as_str(), &v.reason)) | 1
}

fn print_flow(
    f: &crate::flow::Flow,
    v: &Verdict,
    final_: bool,
    format: Format,
    out: &mut std::io::Stdout,
) {
    match format {
        Format::Json => emit(out, &render::flow_json_line(f, v, final_)),
        Format::Text => emit(out, &render::flow_text(f, v)),
    }
}

/// CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns().
fn now_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_err(|e| anyhow!("{e}"))
        .expect("CLOCK_MONOTONIC");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}
