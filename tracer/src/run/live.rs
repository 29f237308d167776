//! `follow` on the live node: a [`Session`] feeds ring records and
//! counted totals to a [`Pipeline`] (and a [`Recorder`] when asked);
//! verdicts go to a [`Sink`] as flows settle and in the final report.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::{
    kernel::loader::{self, probes},
    kernel::session::{Session, SessionError, SessionOptions, trim_heap},
    model::names::Names,
    node::{
        nftrace::{Followed, NfTrace, VxlanPorts},
        vip::VipWatch,
    },
    output::{
        NodeStamp, Sink, Summary, WallClock,
        cpu::Shed,
        diag,
        summary::{MacSeen, TcSummary, VipSummary},
    },
    run::budget::{Budget, Step, kernel_bits, own_cpu_secs},
    run::facts::{LiveEnv, nf_baseline, watched_netns},
    run::pipeline::Pipeline,
    run::record::{Header, Reasons, RecordError, RecordedVerdict, Recorder, Trailer},
    run::trace_load::{Back, Change, TraceLoad},
    verdict::Completeness,
};

/// Why `follow` could not start or went on no longer. The session's and
/// the recording's errors pass through as they are.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("start runtime")]
    Runtime(#[source] std::io::Error),
    #[error("install the SIGINT/SIGTERM/SIGHUP/SIGPIPE handlers")]
    Signals(#[source] std::io::Error),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("write ready file {path}")]
    ReadyFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("wait for address changes of the watched namespaces")]
    VipWatch(#[source] std::io::Error),
}

/// `--record FILE`: its path, and the file opened before anything was
/// attached.
#[derive(Debug)]
pub struct RecordTo {
    pub path: PathBuf,
    pub file: std::fs::File,
}

/// Everything `tracer follow` was asked.
#[derive(Debug)]
pub struct FollowOptions {
    pub session: SessionOptions,
    /// The target as given, and --proto (for a recording's header).
    pub target_arg: String,
    pub proto_arg: Option<String>,
    pub max_flows: usize,
    pub duration: Option<Duration>,
    pub count: Option<u64>,
    pub ready_file: Option<PathBuf>,
    pub record: Option<RecordTo>,
    /// Name netfilter rules by nf_tables tracing (node::nftrace).
    pub nftrace: bool,
    /// The node's name in the output (`--node`, default the hostname).
    pub node: String,
    /// tracer's own CPU budget, percent of one CPU; 0 for none
    /// (run/budget.rs).
    pub max_cpu: f64,
}

/// How many flows are judged between two ring reads while printing
/// settled flows: with 100k flows, judging them all at once kept the loop
/// from the ring buffer and events were lost.
const DRAIN_EVERY: usize = 64;

pub fn follow(opts: FollowOptions, sink: &mut dyn Sink) -> Result<(), RunError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?
        .block_on(run(opts, sink))
}

fn started_banner(opts: &FollowOptions, session: &Session, ready_ms: u128) {
    let plan = session.plan();
    let attached = plan.iter().filter(|p| p.attached).count();
    diag::info(&format!(
        "following {}: {attached}/{} hooks, tc on {} interfaces ({:?}) in {} namespace(s), ready in {ready_ms} ms",
        opts.session.target,
        plan.len(),
        session.tc_interfaces(),
        session.tc_mode(),
        opts.session.netns.len().max(1),
    ));
    if session.tc_pending() {
        diag::info(
            "tc: the other interfaces are being hooked in the background \
             (each tcx link waits for the kernel; the device tracepoints see them meanwhile)",
        );
    }
    diag::info(&format!("backends: {}", probes::backend_summary(plan)));
    for p in plan.iter().filter(|p| p.missing() && p.core) {
        diag::warn(&format!(
            "hook {} unavailable ({}): {}",
            p.hook,
            p.feeds,
            p.error.clone().unwrap_or_default()
        ));
    }
    let gaps: Vec<&str> = plan
        .iter()
        .filter(|p| p.missing() && !p.core)
        .map(|p| p.hook.as_str())
        .collect();
    if !gaps.is_empty() {
        diag::note(&format!(
            "function hooks unavailable here: {} (`tracer doctor` says why)",
            gaps.join(", ")
        ));
    }
    if loader::empty_programs() {
        diag::warn(
            "TRACER_EMPTY_PROGRAMS=1: every kernel program returns at once; \
             nothing is traced (a measure of the hooks' own cost)",
        );
    }
}

fn completeness_base(plan: &[probes::ProbeStatus]) -> Completeness {
    Completeness {
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
    }
}

fn header(
    opts: &FollowOptions,
    names: &Names,
    ktime_to_unix_ns: i64,
    tunnel_ports: [u16; 2],
) -> Header {
    Header {
        tracer_version: env!("CARGO_PKG_VERSION").to_string(),
        kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        target: opts.target_arg.clone(),
        proto: opts.proto_arg.clone(),
        max_flows: opts.max_flows,
        started_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        dns_port: opts.session.dns_port,
        tunnel_ports: tunnel_ports.into_iter().filter(|p| *p != 0).collect(),
        ktime_to_unix_ns: Some(ktime_to_unix_ns),
        reasons: Some(Reasons {
            drop: names.drop_reasons.clone().into_iter().collect(),
            rst: names.rst_reasons.clone().into_iter().collect(),
            no_drop_reason: names.no_drop_reason,
        }),
    }
}

/// The recording `--record` asks for (its code addresses then kept).
fn recorder(
    opts: &FollowOptions,
    to: Option<RecordTo>,
    names: &Names,
    ktime_to_unix_ns: i64,
    tunnel_ports: [u16; 2],
) -> Option<Recorder> {
    let to = to?;
    names.kallsyms.record();
    Some(Recorder::new(
        &to.path,
        to.file,
        &header(opts, names, ktime_to_unix_ns, tunnel_ports),
    ))
}

/// The wall clock read now, given to the sink with the node's name (JSON
/// records are dated by it), and the recording when asked.
fn stamp_and_record(
    opts: &FollowOptions,
    to: Option<RecordTo>,
    names: &Names,
    tunnel_ports: [u16; 2],
    sink: &mut dyn Sink,
) -> (WallClock, Option<Recorder>) {
    let wall = wall_clock();
    sink.stamp(NodeStamp {
        node: opts.node.clone(),
        clock: wall,
    });
    (
        wall,
        recorder(opts, to, names, wall.ktime_to_unix_ns, tunnel_ports),
    )
}

/// Where netfilter rules are named by tracing, said once.
fn nftrace_banner(opts: &FollowOptions, trace: Option<&NfTrace>) {
    let said = match trace {
        None if !opts.nftrace => {
            "off (--no-nftrace): rules are named by their counters".to_string()
        }
        None => return,
        Some(t) if t.labels().is_empty() => {
            "no namespace has nf_tables tables: nothing to trace".to_string()
        }
        Some(t) => format!(
            "table inet {} sets nftrace on followed packets in netns {} (removed on exit)",
            crate::node::nftrace::table_name(),
            t.labels().join(", ")
        ),
    };
    diag::info(&format!("nftrace: {said}"));
}

/// The live run's moving parts, between start and the final report.
struct Live<'a> {
    session: Session,
    pipeline: Pipeline,
    rec: Option<Recorder>,
    env: LiveEnv,
    sink: &'a mut dyn Sink,
    /// Run-wide completeness (missing hooks); counters are added per tick.
    base: Completeness,
    /// Owner changes seen at the last print: a change re-judges every
    /// quiet flow.
    vip_changes: usize,
    started: Instant,
    /// The wall clock against ktime, read at start.
    clock: WallClock,
    /// The recording's write error was said (once is enough).
    rec_failure_said: bool,
    /// The kernel's count of counted packets when the `AGG` map was last
    /// walked ([`Live::poll_counted`]).
    counted_walked: Option<u64>,
    /// tracer's own CPU against `--max-cpu`, sampled every tick (from
    /// ready on).
    budget: Budget,
    /// How fast followed packets come: nftrace stands aside for a flood
    /// (run/trace_load.rs).
    trace_load: TraceLoad,
}

/// The signals that end a run: SIGINT, SIGTERM, and SIGHUP and SIGPIPE
/// (a closed terminal or pipe), each as SIGTERM does: detached, the
/// recording and pcap finished, the ready file removed.
struct Stops {
    int: Signal,
    term: Signal,
    hup: Signal,
    pipe: Signal,
}

impl Stops {
    fn install() -> Result<Stops, RunError> {
        let on = |k| signal(k).map_err(RunError::Signals);
        Ok(Stops {
            int: on(SignalKind::interrupt())?,
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
            pipe: on(SignalKind::pipe())?,
        })
    }

    /// The next one, as the summary's `stop` names it.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "interrupted",
            _ = self.term.recv() => "terminated",
            _ = self.hup.recv() => "hangup",
            _ = self.pipe.recv() => "broken pipe",
        }
    }
}

/// The netfilter counters before tracing, per namespace inode.
type NfBaseline = std::collections::HashMap<u32, Vec<crate::node::netfilter::NfRule>>;

/// nftrace as set up, and the namespaces where the kernel refused it.
type StartedTrace = (NfTrace, Vec<(String, crate::node::nftrace::NfTraceError)>);

/// What is read before tracing, off the start-up path: nftrace set up
/// (with `nftrace`), the netfilter counters' baseline, and the endpoints
/// of the target's Service traced from the start.
fn before_tracing(
    nftrace: bool,
    followed: &Followed,
    traced_netns: &[(String, PathBuf)],
    netns_paths: Vec<PathBuf>,
) -> (NfBaseline, Option<StartedTrace>) {
    let mut trace = nftrace.then(|| NfTrace::start(followed, traced_netns));
    let (base, endpoints) = nf_baseline(netns_paths, followed);
    if let Some((t, _)) = &mut trace {
        let n = t.follow_endpoints(endpoints);
        log::debug!("nftrace: {n} endpoints of the target's Service traced from the start");
    }
    (base, trace)
}

/// The target as nftrace follows it: into VXLAN where the driver is
/// loaded, on the usual ports and the node's devices' own, read here once
/// for the skb programs too (`SessionOptions::tunnel_ports`).
fn followed(s: &mut crate::kernel::session::SessionOptions) -> Followed {
    if crate::node::link::tunnel_drivers_loaded() {
        s.tunnel_ports = Some(crate::kernel::session::node_tunnel_ports(s));
    }
    let (t, tunnel_ports) = (&s.target, s.tunnel_ports.unwrap_or_default());
    Followed {
        addr: t.addr,
        prefix: t.prefix,
        port: t.port,
        l4proto: t.proto.map(|p| p.number(t.addr.is_ipv6())),
        vxlan: if crate::node::link::vxlan_loaded() {
            VxlanPorts::usual_and(&tunnel_ports)
        } else {
            VxlanPorts::NONE
        },
    }
}

async fn run(mut opts: FollowOptions, sink: &mut dyn Sink) -> Result<(), RunError> {
    let started = Instant::now();
    let record_to = opts.record.take();
    // Signals first: a Ctrl-C during attach is handled after it, with cleanup.
    let mut stops = Stops::install()?;
    // Netfilter counters before tracing: off the start-up path, joined
    // before the ready file is written.
    // The nftrace tables are added from the same thread.
    let netns_paths: Vec<PathBuf> = opts.session.netns.iter().map(|n| n.path.clone()).collect();
    let traced_netns = watched_netns(&opts.session.netns);
    let followed = followed(&mut opts.session);
    let nftrace = opts.nftrace;
    let baseline =
        std::thread::spawn(move || before_tracing(nftrace, &followed, &traced_netns, netns_paths));

    let (session, knames, start) = Session::start(&opts.session, started)?;
    let mut names = knames.into_names();
    names.icmp_unhooked = session
        .plan()
        .iter()
        .any(|p| p.hook == "icmp_send" && p.missing());
    let (wall, rec) = stamp_and_record(&opts, record_to, &names, start.tunnel_ports, sink);
    let target = opts.session.target;
    let mut vip = VipWatch::new(watched_netns(&opts.session.netns));
    vip.start(&|a| target.contains(a));
    // Address changes of the watched namespaces wake the loop at once (the
    // tick polls too, which costs nothing when none came).
    let vip_events = vip
        .fd()
        .and_then(|fd| fd.try_clone_to_owned().ok())
        .and_then(|fd| {
            // SAFETY: an OwnedFd (a dup of the epoll set) keeps one open fd
            // for as long as the AsyncFd, which owns it, lives.
            unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
            }
            .ok()
        });
    let (nf_base, trace) = baseline.join().unwrap_or_default();
    let trace = trace.map(|(t, failed)| {
        for (label, e) in failed {
            diag::warn(&format!(
                "nftrace off in netns {label}: {e}; its netfilter rules are named by counters only"
            ));
        }
        t
    });
    let env = LiveEnv::new(vip, nf_base, trace);
    // Ready as the ready file says it: everything above is done.
    let ready_ms = started.elapsed().as_millis();
    let _ready = opts
        .ready_file
        .as_deref()
        .map(ReadyFile::create)
        .transpose()?;
    started_banner(&opts, &session, ready_ms);
    nftrace_banner(&opts, env.nftrace());
    for w in &start.warnings {
        diag::warn(w);
    }
    sink.probe_errors(session.plan());
    let mut pipeline = Pipeline::new(target, names, opts.max_flows)
        .with_dns_port(opts.session.dns_port)
        .with_tunnel_ports(&start.tunnel_ports);
    if sink.wants_packets() {
        pipeline.capture_packets(wall.ktime_to_unix_ns);
    }
    let mut live = Live {
        base: completeness_base(session.plan()),
        session,
        pipeline,
        rec,
        env,
        sink,
        vip_changes: 0,
        started,
        clock: wall,
        rec_failure_said: false,
        counted_walked: None,
        budget: Budget::new(opts.max_cpu),
        trace_load: TraceLoad::starting_at(started.elapsed().as_millis() as u64),
    };
    let deadline = opts.duration.map(|d| tokio::time::Instant::now() + d);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut drain_tick = tokio::time::interval(Duration::from_millis(10));
    drain_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let stop = loop {
        let sleep_deadline = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let vip_changed = async {
            match &vip_events {
                Some(fd) => fd.readable().await.map(|mut g| g.clear_ready()),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            stop = stops.recv() => break stop,
            r = vip_changed => {
                r.map_err(RunError::VipWatch)?;
                live.vip_changed();
            }
            () = sleep_deadline => break "duration reached",
            r = live.session.readable() => {
                r?;
                live.drain();
                // Flows quiet for FlowTable's PACK_NS are packed
                // (frozen.rs): with 100k flows, that is what keeps the
                // table within 64 MiB.
                live.pipeline.pack_quiet(now_ns());
            }
            // The kernel programs wake us only once WAKE_BYTES are waiting
            // (emit.rs); below that, records are read on this tick.
            _ = drain_tick.tick() => {
                live.drain();
                live.pipeline.pack_quiet(now_ns());
            }
            _ = tick.tick() => {
                live.tick();
                if crate::output::stdout_closed() {
                    break "stdout closed";
                }
                if opts.count.is_some_and(|n| live.pipeline.settled_count() >= n) {
                    break "count reached";
                }
            }
        }
    };
    live.finish(&opts, stop, ready_ms);
    Ok(())
}

/// Detach the session, and ingest what the programs wrote before they
/// went (a flood's tail that the last bounded drain left); its captured
/// bytes go to the pcap with the rest.
fn detach(
    session: Session,
    pipeline: &mut Pipeline,
    rec: &mut Option<Recorder>,
    sink: &mut dyn Sink,
) -> crate::kernel::session::Teardown {
    let teardown = session.finish(&mut |b| {
        if let Some(r) = rec.as_mut() {
            r.ring(b);
        }
        pipeline.ingest(b);
    });
    let captured = pipeline.take_captured();
    if !captured.is_empty() {
        sink.packets(captured);
    }
    teardown
}

/// `--ready-file`: created (with our PID) once every probe is attached,
/// as a new file (O_EXCL, never through a symbolic link): ours, so
/// removed when the run ends, on every path, unless the path names
/// another file by then.
struct ReadyFile {
    path: PathBuf,
    /// Device and inode of the file we created.
    id: (u64, u64),
}

impl ReadyFile {
    fn create(path: &std::path::Path) -> Result<ReadyFile, RunError> {
        use std::{io::Write, os::unix::fs::MetadataExt};
        let err = |source| RunError::ReadyFile {
            path: path.into(),
            source,
        };
        let mut f = crate::output::files::create_new(path).map_err(|e| err(e.into()))?;
        f.write_all(format!("{}\n", std::process::id()).as_bytes())
            .map_err(err)?;
        let m = f.metadata().map_err(err)?;
        Ok(ReadyFile {
            path: path.into(),
            id: (m.dev(), m.ino()),
        })
    }
}

impl Drop for ReadyFile {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = self.path.symlink_metadata()
            && (m.dev(), m.ino()) == self.id
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Live<'_> {
    /// The ring records waiting now into the pipeline (and the
    /// recording); the MACs seen to the owner watch.
    fn drain(&mut self) {
        let (pipeline, rec) = (&mut self.pipeline, &mut self.rec);
        self.session.drain(&mut |b| {
            if let Some(r) = rec.as_mut() {
                r.ring(b);
            }
            pipeline.ingest(b);
        });
        let captured = self.pipeline.take_captured();
        if !captured.is_empty() {
            self.sink.packets(captured);
        }
        self.env.poll_nftrace();
        for t in self.pipeline.take_dnat() {
            self.env.nftrace_also(Followed::endpoint(
                t.dst,
                (t.dport != 0).then_some(t.dport),
                (t.proto != 0).then_some(t.proto),
            ));
        }
        for (addr, mac) in self.pipeline.take_macs() {
            self.env.vip.note_mac(addr, &mac);
        }
    }

    /// Leave out, or take back, what the CPU budget says (run/budget.rs);
    /// said on stderr.
    fn budget_step(&mut self, step: Step) {
        let shed = self.budget.shed();
        if let Err(e) = self.session.set_shed(kernel_bits(shed)) {
            diag::warn(&format!("CPU budget: {e}"));
        }
        let (what, pct) = match step {
            Step::Shed(w, p) | Step::Restore(w, p) => (w, p),
        };
        if what == Shed::Nftrace {
            self.nftrace_pause("CPU budget");
        }
        let max = self.budget.max().unwrap_or(0.0);
        match step {
            Step::Shed(..) => diag::warn(&format!(
                "over its CPU budget ({pct:.1}% of one CPU over the last 2 s, --max-cpu {max}): {} left out",
                what.said()
            )),
            Step::Restore(..) => diag::info(&format!(
                "under its CPU budget again ({pct:.1}% of one CPU, --max-cpu {max}): {} back",
                what.said()
            )),
        }
    }

    /// nftrace's rules out of tracer's chains while the CPU budget leaves
    /// nftrace out or a flood of followed packets goes by, back otherwise;
    /// where the kernel refused, said under `why`.
    fn nftrace_pause(&mut self, why: &str) {
        let paused = self.budget_sheds_nftrace() || self.trace_load.paused();
        for (ns, errno) in self.env.nftrace_pause(paused) {
            diag::warn(&format!(
                "{why}: nftrace in netns {ns}: {}",
                std::io::Error::from_raw_os_error(errno)
            ));
        }
    }

    /// Does the CPU budget leave nftrace out now?
    fn budget_sheds_nftrace(&self) -> bool {
        self.budget.shed().contains(&Shed::Nftrace)
    }

    /// Every tick with nftrace on: stand aside for a flood of followed
    /// packets, or come back (run/trace_load.rs); said on stderr.
    fn trace_load_step(&mut self, t: u64, counted: u64) {
        if self.env.nftrace().is_none() {
            return;
        }
        let (seen, drops) = self.pipeline.packets_seen();
        let Some(change) = self.trace_load.sample(t, seen + counted, drops) else {
            return;
        };
        self.nftrace_pause("nftrace");
        let budget = if self.budget_sheds_nftrace() {
            " (the CPU budget still leaves it out)"
        } else {
            ""
        };
        match change {
            Change::Paused(per_s) => diag::info(&format!(
                "nftrace: followed packets come as a flood ({per_s} hook passages/s): its first packets were traced; no more until one is dropped or the flood ends (a drop meanwhile is named by the rules' counters)"
            )),
            Change::Resumed(Back::Drop, _) => diag::info(&format!(
                "nftrace: a followed packet was dropped during the flood: tracing again for 1 s to name the rule{budget}"
            )),
            Change::Resumed(Back::Quiet, per_s) => diag::info(&format!(
                "nftrace: the flood is over ({per_s} hook passages/s): tracing again{budget}"
            )),
        }
    }

    /// Fold the kernel's counted totals into the flows (and the recording),
    /// when the kernel counted a packet since the last walk of its map
    /// (`counted`: stat::COUNTED now; None walks it anyway). With many
    /// short flows, each within its budget of records, nothing is counted
    /// and the walk (two syscalls per key, up to 16,384 keys) was most of
    /// tracer's own CPU.
    fn poll_counted(&mut self, counted: Option<u64>) {
        if counted.is_some() && counted == self.counted_walked {
            return;
        }
        self.counted_walked = counted;
        let pipeline = &self.pipeline;
        match self.session.counted_totals(&|k| pipeline.counted_knows(k)) {
            Ok(totals) => {
                if let Some(r) = self.rec.as_mut() {
                    r.counted(&totals);
                }
                self.pipeline.fold_counted(totals);
            }
            Err(e) => diag::warn(&format!("reading counted packets: {e}")),
        }
    }

    fn since_start_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A watched namespace's addresses changed: the target's owners now.
    fn vip_changed(&mut self) {
        let t = self.since_start_ms();
        let target = *self.pipeline.target();
        self.env.vip.poll(&|a| target.contains(a), t);
    }

    /// Every 250 ms: owners of the target (a namespace is read only when
    /// it said its addresses changed); every 500 ms new interfaces
    /// and the counted packets; then the flows that settled.
    fn tick(&mut self) {
        let t = self.since_start_ms();
        if let Some(step) = self.budget.sample(t, own_cpu_secs()) {
            self.budget_step(step);
        }
        let target = *self.pipeline.target();
        self.env.vip.poll(&|a| target.contains(a), t);
        if let Some((said, errors)) = self.session.attach_needed() {
            diag::note(&said);
            for e in &errors {
                diag::warn(e);
            }
        }
        if let Some(warnings) = self.session.maintain() {
            for w in &warnings {
                diag::warn(w);
            }
            self.poll_counted(Some(self.session.counters().counted));
            // Packing frees each quiet flow's hops, in blocks spread over
            // the heap among live data; glibc returns whole free pages only
            // when asked.
            trim_heap();
        }
        let k = self.session.counters();
        self.trace_load_step(t, k.counted);
        let c = Completeness {
            lost_events: k.lost,
            map_failures: k.track_fail + k.flowkey_fail,
            ..self.base.clone()
        };
        self.print_settled(&c);
        // At least every second (this is every 250 ms): a tracer killed
        // by SIGKILL leaves what was recorded up to here.
        self.flush_files();
    }

    /// Hand the recording's and the pcap's buffered frames to their files;
    /// a recording's first write error is said at once (the trace goes
    /// on, the recording stops there).
    fn flush_files(&mut self) {
        if let Some(r) = self.rec.as_mut() {
            r.flush();
            if let (false, Some(e)) = (self.rec_failure_said, r.failed()) {
                self.rec_failure_said = true;
                diag::warn(&format!(
                    "recording stopped (the trace goes on): cannot write {}: {e}",
                    r.path().display()
                ));
            }
        }
        self.sink.flush();
    }

    /// Flows quiet for 500 ms whose verdict is settled (or changed since
    /// last printed) are printed as they are known. A printed flow with no
    /// hop since is not judged again, unless the target's owner changed.
    /// The ring is drained between every [`DRAIN_EVERY`] flows judged.
    fn print_settled(&mut self, c: &Completeness) {
        let recheck = self.env.vip.changes.len() != self.vip_changes;
        self.vip_changes = self.env.vip.changes.len();
        let now = now_ns();
        let quiet = self.pipeline.quiet_flows(now, recheck);
        for (i, id) in quiet.into_iter().enumerate() {
            if i > 0 && i % DRAIN_EVERY == 0 {
                self.drain();
            }
            if let Some((f, v)) = self.pipeline.judge(id, &mut self.env, c) {
                self.sink
                    .flow(&f, &v, false, self.pipeline.names().netns.pods());
                if let Some(r) = self.rec.as_mut() {
                    r.printed(id);
                }
            }
        }
    }

    /// Drain what is left, detach before the (slower) final report, then
    /// report every flow, the summary, and close the recording.
    fn finish(mut self, opts: &FollowOptions, stop: &str, ready_ms: u128) {
        // Neighbour MACs included: incident 1's second owner is often
        // among the last records.
        self.drain();
        // Owner changes since the last tick.
        let t = self.since_start_ms();
        let target = *self.pipeline.target();
        self.env.vip.poll(&|a| target.contains(a), t);
        // Packets counted in the kernel since the last poll (the maps go
        // with the programs).
        self.poll_counted(None);
        let traced_to = unix_now_ns();
        let traced_from =
            traced_to - (self.started.elapsed().as_nanos() as i64 - ready_ms as i64 * 1_000_000);
        let Live {
            session,
            mut pipeline,
            mut rec,
            mut env,
            sink,
            base,
            started,
            clock,
            rec_failure_said,
            budget,
            trace_load,
            ..
        } = self;
        let probes = session.plan().to_vec();
        let teardown = detach(session, &mut pipeline, &mut rec, sink);
        for e in &teardown.errors {
            diag::warn(&format!("detach: {e}"));
        }
        let c = Completeness {
            lost_events: teardown.counters.lost,
            map_failures: teardown.counters.track_fail + teardown.counters.flowkey_fail,
            ..base
        };
        env.expire();
        let names = pipeline.names();
        let (netns_names, locations) = (names.netns.known(), names.kallsyms.recorded());
        let netns_pods = names.netns.pods().to_map();
        let (drop_reasons, rst_reasons) = (names.drop_reasons.clone(), names.rst_reasons.clone());
        let no_drop_reason = names.no_drop_reason;
        let decode_errors = pipeline.decode_errors;
        let target = pipeline.target().to_string();
        let followed = *pipeline.target();
        sink.report_start(pipeline.flow_count(), &target, stop);
        let mut verdicts = Vec::new();
        let tally = pipeline.report(&mut env, &c, |f, v, pods| {
            sink.flow(f, v, true, pods);
            verdicts.push(RecordedVerdict::of(f.id, v));
        });
        let mut summary = Summary {
            type_: "summary".into(),
            flows: tally.flows,
            events: 0,
            lost_events: 0,
            untracked_evictions: 0,
            flow_key_insert_failures: 0,
            stale_skb_reuse: 0,
            packets_filtered: 0,
            counted_in_kernel: tally.counted_total,
            counted_unattributed: tally.counted_unattributed,
            flows_evicted: tally.evicted,
            duration_ms: started.elapsed().as_millis() as u64,
            probes,
            tc: TcSummary {
                mode: format!("{:?}", teardown.tc_mode).to_lowercase(),
                interfaces: teardown.tc_interfaces,
                detach_ms: teardown.detach_ms as u64,
                ready_ms: ready_ms as u64,
            },
            verdicts: tally.verdicts,
            dns: tally.dns,
            netns: if opts.session.netns.is_empty() {
                vec!["all".into()]
            } else {
                opts.session.netns.iter().map(|n| n.label.clone()).collect()
            },
            // Read after the final report, so it covers the whole run.
            peak_rss_kib: crate::node::procstat::self_status_kib("VmHWM:"),
            stop: stop.into(),
            decode_errors,
            packed_flows: tally.packed_flows,
            packed_bytes: tally.packed_bytes,
            vip: vip_summary(&env.vip),
            replay: None,
            pcap: None,
            node: Some(opts.node.clone()),
            target: Some(target_label(opts)),
            clock: Some(WallClock {
                drift_ns: Some(wall_clock().ktime_to_unix_ns - clock.ktime_to_unix_ns),
                ..clock
            }),
            traced_from_unix_ns: Some(traced_from),
            traced_to_unix_ns: Some(traced_to),
            cpu: Some(trace_load.with_floods(budget.summary())),
            nothing_seen: (tally.flows == 0).then(|| {
                crate::node::unseen::read(
                    &|a, port| followed.contains(a) && followed.port.is_none_or(|p| p == port),
                    followed.single_addr(),
                    &traced_netns(opts),
                )
            }),
        };
        summary.counters(&teardown.counters);
        sink.summary(&summary);
        if let Some(r) = rec {
            let trailer = Trailer {
                drop_reasons: drop_reasons.into_iter().collect(),
                no_drop_reason,
                rst_reasons: rst_reasons.into_iter().collect(),
                netns_names,
                netns_pods,
                locations,
                facts: env.snapshot().into(),
                completeness: c,
                summary,
                verdicts,
            };
            close_recording(r, &trailer, rec_failure_said);
        }
        diag::info(&format!(
            "stopped ({stop}); detached in {} ms",
            teardown.detach_ms
        ));
    }
}

/// The namespaces this run traced, (label, path): the ones asked for, or
/// tracer's own (`host`) and every named one.
fn traced_netns(opts: &FollowOptions) -> Vec<(String, std::path::PathBuf)> {
    if opts.session.netns.is_empty() {
        std::iter::once(("host".to_string(), "/proc/self/ns/net".into()))
            .chain(crate::node::netns::named())
            .collect()
    } else {
        opts.session
            .netns
            .iter()
            .map(|n| (n.label.clone(), n.path.clone()))
            .collect()
    }
}

fn vip_summary(vip: &VipWatch) -> VipSummary {
    VipSummary {
        owners: vip.owners(),
        changes: vip.changes.clone(),
        macs: vip
            .macs
            .iter()
            .map(|(addr, mac)| MacSeen {
                addr: *addr,
                mac: mac.clone(),
            })
            .collect(),
    }
}

/// Write the trailer and say how it went (a write error only if not said
/// already while tracing).
fn close_recording(r: Recorder, trailer: &Trailer, failure_said: bool) {
    let path = r.path().to_path_buf();
    match r.finish(trailer) {
        Ok(bytes) => diag::info(&format!("recorded {bytes} bytes to {}", path.display())),
        Err(e) if !failure_said => diag::warn(&crate::kernel::error_chain(&e)),
        Err(_) => {}
    }
}

/// The wall clock (CLOCK_REALTIME), ns since the epoch.
fn unix_now_ns() -> i64 {
    clock_ns(nix::time::ClockId::CLOCK_REALTIME)
}

/// CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns().
fn now_ns() -> u64 {
    clock_ns(nix::time::ClockId::CLOCK_MONOTONIC) as u64
}

fn clock_ns(id: nix::time::ClockId) -> i64 {
    let ts = nix::time::clock_gettime(id).expect("CLOCK_MONOTONIC and CLOCK_REALTIME");
    ts.tv_sec() * 1_000_000_000 + ts.tv_nsec()
}

/// The target as given, with `/proto` when `--proto` was: what the
/// summary names for `tracer merge`.
fn target_label(opts: &FollowOptions) -> String {
    match &opts.proto_arg {
        Some(p) => format!("{}/{p}", opts.target_arg),
        None => opts.target_arg.clone(),
    }
}

/// Wall clock minus the kernel programs' clock (bpf_ktime_get_ns(),
/// CLOCK_MONOTONIC), ns: what dates a record's `ts_ns` (`--pcap`, `-o
/// json`'s `unix_ns`; kept in recordings). Read between two monotonic
/// reads, five times: the tightest bracket wins, and half its width is
/// the uncertainty of the offset.
fn wall_clock() -> WallClock {
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..5 {
        let mono = clock_ns(nix::time::ClockId::CLOCK_MONOTONIC);
        let wall = clock_ns(nix::time::ClockId::CLOCK_REALTIME);
        let mono2 = clock_ns(nix::time::ClockId::CLOCK_MONOTONIC);
        let width = mono2 - mono;
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, wall - (mono + width / 2)));
        }
    }
    let (width, offset) = best.expect("five reads");
    WallClock {
        ktime_to_unix_ns: offset,
        // Rounded up: a 1 ns bracket is still not exact.
        uncertainty_ns: (width as u64).div_ceil(2).max(1),
        drift_ns: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{error_chain, loader::LoadError};

    /// The error line of a failed `follow` (each cause after ": ") says
    /// every cause once: wrapped errors pass through, sources are not
    /// repeated in the messages.
    #[test]
    fn error_lines_say_each_cause_once() {
        let e = RunError::from(SessionError::from(LoadError::TcProgram {
            name: "tracer_tc_ingress".into(),
            why: "the kernel refused the load: Operation not permitted (os error 1)".into(),
        }));
        assert_eq!(
            error_chain(&e),
            "load tracer_tc_ingress: the kernel refused the load: Operation not permitted (os error 1)"
        );
        let e = RunError::from(SessionError::NoBtf {
            path: "/nonexistent/vmlinux".into(),
        });
        let line = error_chain(&e);
        assert!(
            line.contains("no BTF (/nonexistent/vmlinux missing)")
                && line.contains("CONFIG_DEBUG_INFO_BTF"),
            "{line}"
        );
        let e = RunError::ReadyFile {
            path: "/nonexistent/ready".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert_eq!(
            error_chain(&e),
            "write ready file /nonexistent/ready: No such file or directory (os error 2)"
        );
    }
}
