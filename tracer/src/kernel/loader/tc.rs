//! tc attachment on every interface of the traced namespaces, kept in sync
//! as interfaces come and go, and removed in the right namespace at exit.
//!
//! tcx links (Linux >= 6.6) are bpf_link file descriptors: the kernel removes
//! them when the last fd closes, even after SIGKILL. Netlink (clsact)
//! filters outlive the process, so they are removed explicitly, from inside
//! their namespace (netlink talks to the caller's namespace).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc::{self, Receiver, RecvTimeoutError, Sender},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use aya::{
    Ebpf,
    programs::{
        LinkOrder, ProgramError, SchedClassifier, TcAttachType,
        tc::{NlOptions, SchedClassifierLink, TcAttachOptions, qdisc_add_clsact},
    },
};

use crate::{
    kernel::error_chain,
    kernel::tracer_lock::{QdiscRecord, TracerLock},
    node::netns::{NetnsError, NetnsGuard, interfaces},
};

/// Why tc could not be put on an interface, or the attacher started.
/// aya's errors are part of the message with their causes
/// ([`error_chain`]): these messages also end up in warning lines made
/// with `{e}`.
#[derive(Debug, thiserror::Error)]
pub enum TcError {
    #[error("program {0} missing from the object")]
    MissingProgram(&'static str),
    #[error("program {name} is not a tc program: {}", error_chain(.err))]
    NotTc {
        name: &'static str,
        err: ProgramError,
    },
    #[error("{name} not loaded: {}", error_chain(.err))]
    NotLoaded {
        name: &'static str,
        err: ProgramError,
    },
    #[error("dup program fd: {0}")]
    DupFd(std::io::Error),
    #[error("start the tc attacher thread: {0}")]
    Thread(std::io::Error),
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error("add clsact qdisc: {0}")]
    AddClsact(aya::programs::tc::TcError),
    #[error("attach {name}: {err}")]
    Attach {
        name: &'static str,
        err: ProgramError,
    },
    #[error("take tc link: {}", error_chain(.0))]
    TakeLink(ProgramError),
}

pub const INGRESS_PROG: &str = "tracer_tc_ingress";
pub const EGRESS_PROG: &str = "tracer_tc_egress";

/// How long the first [`TcManager::sync`] waits for tcx links on the
/// tracer's own namespace before leaving the rest to the attacher thread
/// (see [`TcManager`]).
const START_BUDGET: Duration = Duration::from_millis(100);
/// How often the attacher thread looks for new interfaces by itself.
const SCAN_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcMode {
    /// tcx links, first in the chain so other programs' redirects are seen.
    Tcx,
    /// clsact qdisc + direct-action filter (pre-6.6 kernels).
    Netlink,
}

/// Where to attach: a namespace (None: the tracer's own) and an optional
/// interface allow-list.
#[derive(Debug, Clone)]
pub struct TcScope {
    pub netns: Option<PathBuf>,
    /// The namespace file `netns` names, held open for the whole run: a
    /// namespace whose name is deleted meanwhile is still reached.
    pub keep: Option<Arc<OwnedFd>>,
    pub label: String,
}

impl TcScope {
    /// The namespace's inode (what a lock file names it by).
    fn inode(&self) -> u32 {
        let own = std::path::Path::new("/proc/self/ns/net");
        crate::node::netns::netns_inode(self.netns.as_deref().unwrap_or(own)).unwrap_or(0)
    }
}

enum Links {
    /// Netlink filters, through aya (removed in their namespace).
    Aya(Vec<SchedClassifierLink>),
    /// tcx bpf_links made by the attacher thread: closing the last fd
    /// detaches, from any namespace.
    Tcx(Vec<OwnedFd>),
}

impl Links {
    fn clear(&mut self) {
        match self {
            Links::Aya(v) => v.clear(),
            Links::Tcx(v) => v.clear(),
        }
    }
}

struct Attachment {
    scope: usize,
    iface: String,
    links: Links,
    created_qdisc: bool,
}

/// What the attacher thread reports.
enum Event {
    Attached {
        scope: usize,
        ifindex: u32,
        iface: String,
        links: Vec<OwnedFd>,
    },
    Failed {
        scope: usize,
        iface: String,
        error: String,
    },
    Gone {
        scope: usize,
        ifindex: u32,
    },
    ScopeError {
        scope: usize,
        error: String,
    },
    /// Scan number n (asked for by `sync`) is complete.
    ScanDone(u64),
}

struct Attacher {
    scan_tx: Option<Sender<u64>>,
    events: Receiver<Event>,
    stop: Arc<AtomicBool>,
    /// Interfaces the thread has hooked (and not seen vanish), collected
    /// by `sync` or not.
    live: Arc<AtomicUsize>,
    handle: Option<JoinHandle<()>>,
    /// Scans asked for, and the last one reported done.
    scans: u64,
    done: u64,
}

/// tc programs on every interface of the traced namespaces.
///
/// Netlink mode attaches inline, in `sync`. In tcx mode a thread of its
/// own does the attaching: each tcx link costs the kernel two RCU grace
/// periods under RTNL (tcx_link_attach(): tcx_entry_sync() and
/// bpf_mprog_commit()), ~14 ms here, so 500 interfaces take ~14 s however
/// they are attached. The thread also scans for new interfaces every
/// [`SCAN_EVERY`] by itself, so a pod created while tracing is hooked
/// within that, without waiting for the next `sync`.
///
/// `sync` waits for the thread's scan to finish, except where the device
/// tracepoints see every device anyway: with only the tracer's own
/// namespace as scope and no interface allow-list (`tracer follow` without
/// `--netns` or `--iface`, tracepoints attached), the first `sync` waits at
/// most [`START_BUDGET`] and the rest is attached in the background (see
/// [`TcManager::pending`]).
pub struct TcManager {
    mode: TcMode,
    scopes: Vec<TcScope>,
    only: Vec<String>,
    attached: HashMap<(usize, u32), Attachment>,
    attacher: Option<Attacher>,
    /// `sync` may return before every interface is hooked.
    background: bool,
    synced_once: bool,
    /// This tracer's lock file, where the clsact qdiscs it adds are
    /// recorded (`tracer cleanup` reads it); dropped after everything is
    /// detached.
    lock: Option<TracerLock>,
    pub errors: Vec<String>,
}

impl TcManager {
    pub fn new(mode: TcMode, scopes: Vec<TcScope>, only: Vec<String>) -> TcManager {
        let background = only.is_empty() && scopes.iter().all(|s| s.netns.is_none());
        TcManager {
            mode,
            scopes,
            only,
            attached: HashMap::new(),
            attacher: None,
            background,
            synced_once: false,
            lock: None,
            errors: Vec::new(),
        }
    }

    /// Hold `lock` until everything is detached, recording there the
    /// qdiscs added.
    pub fn set_lock(&mut self, lock: TracerLock) {
        self.lock = Some(lock);
    }

    /// Whether `sync` may leave interfaces to the attacher thread (tcx
    /// only). The default: when every scope is the tracer's own namespace
    /// and there is no interface allow-list.
    pub fn set_background(&mut self, on: bool) {
        self.background = on;
    }

    pub fn mode(&self) -> TcMode {
        self.mode
    }

    /// Interfaces with tracer's tc programs: in tcx mode, those the
    /// attacher thread hooked, whether or not `sync` collected them yet.
    pub fn attached_count(&self) -> usize {
        match &self.attacher {
            Some(a) => a.live.load(Ordering::SeqCst),
            None => self.attached.len(),
        }
    }

    /// Whether the attacher thread had not finished the scan that the last
    /// `sync` asked for when it returned (interfaces may be unhooked yet).
    pub fn pending(&self) -> bool {
        self.attacher.as_ref().is_some_and(|a| a.done < a.scans)
    }

    /// Interfaces named with --iface that exist in no traced namespace.
    pub fn missing_ifaces(&self) -> Vec<String> {
        self.only
            .iter()
            .filter(|name| !self.attached.values().any(|a| &a.iface == *name))
            .cloned()
            .collect()
    }

    /// Attach to interfaces that appeared, forget those that vanished.
    /// Returns how many were newly attached.
    pub fn sync(&mut self, ebpf: &mut Ebpf) -> Result<usize, TcError> {
        match self.mode {
            TcMode::Netlink => self.sync_inline(ebpf),
            TcMode::Tcx => self.sync_tcx(ebpf),
        }
    }

    fn sync_tcx(&mut self, ebpf: &mut Ebpf) -> Result<usize, TcError> {
        if self.attacher.is_none() {
            self.attacher = Some(self.start_attacher(ebpf)?);
        }
        let first = !self.synced_once;
        self.synced_once = true;
        let att = self.attacher.as_mut().expect("attacher");
        att.scans += 1;
        let want = att.scans;
        if let Some(tx) = &att.scan_tx {
            // A closed channel means the thread ended: collect what it left.
            let _ = tx.send(want);
        }
        let wait = match (self.background, first) {
            (false, _) => None,
            (true, true) => Some(START_BUDGET),
            (true, false) => Some(Duration::ZERO),
        };
        let started = Instant::now();
        let mut added = 0;
        loop {
            let left = wait.map(|w| w.saturating_sub(started.elapsed()));
            let att = self.attacher.as_mut().expect("attacher");
            let ev = match left {
                None => att.events.recv().ok(),
                Some(d) if d.is_zero() => att.events.try_recv().ok(),
                Some(d) => att.events.recv_timeout(d).ok(),
            };
            let Some(ev) = ev else { break };
            match ev {
                Event::ScanDone(n) => {
                    let att = self.attacher.as_mut().expect("attacher");
                    att.done = att.done.max(n);
                    if n >= want {
                        break;
                    }
                }
                ev => added += self.apply(ev),
            }
        }
        Ok(added)
    }

    /// Record what the attacher thread did; 1 for a new attachment.
    fn apply(&mut self, ev: Event) -> usize {
        match ev {
            Event::Attached {
                scope,
                ifindex,
                iface,
                links,
            } => {
                self.attached.insert(
                    (scope, ifindex),
                    Attachment {
                        scope,
                        iface,
                        links: Links::Tcx(links),
                        created_qdisc: false,
                    },
                );
                1
            }
            Event::Failed {
                scope,
                iface,
                error,
            } => {
                self.errors.push(format!(
                    "tc on {iface} in netns {}: {error}",
                    self.scopes[scope].label
                ));
                0
            }
            Event::Gone { scope, ifindex } => {
                // The kernel already dropped the device's tcx entries.
                self.attached.remove(&(scope, ifindex));
                0
            }
            Event::ScopeError { scope, error } => {
                self.errors
                    .push(format!("netns {}: {error}", self.scopes[scope].label));
                0
            }
            Event::ScanDone(_) => 0,
        }
    }

    fn start_attacher(&self, ebpf: &mut Ebpf) -> Result<Attacher, TcError> {
        let mut fds = Vec::new();
        for name in [INGRESS_PROG, EGRESS_PROG] {
            let prog: &mut SchedClassifier = ebpf
                .program_mut(name)
                .ok_or(TcError::MissingProgram(name))?
                .try_into()
                .map_err(|err| TcError::NotTc { name, err })?;
            let fd = prog.fd().map_err(|err| TcError::NotLoaded { name, err })?;
            fds.push(fd.as_fd().try_clone_to_owned().map_err(TcError::DupFd)?);
        }
        let egress = fds.pop().expect("egress fd");
        let ingress = fds.pop().expect("ingress fd");
        let (scan_tx, scan_rx) = mpsc::channel();
        let (ev_tx, events) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(AtomicUsize::new(0));
        let mut worker = Worker {
            live: live.clone(),
            scopes: self.scopes.clone(),
            only: self.only.clone(),
            ingress,
            egress,
            known: HashMap::new(),
            queue: VecDeque::new(),
            scope_failed: HashSet::new(),
            stop: stop.clone(),
            events: ev_tx,
        };
        let handle = std::thread::Builder::new()
            .name("tc-attach".into())
            .spawn(move || worker.run(scan_rx))
            .map_err(TcError::Thread)?;
        Ok(Attacher {
            scan_tx: Some(scan_tx),
            events,
            stop,
            live,
            handle: Some(handle),
            scans: 0,
            done: 0,
        })
    }

    /// Stop the attacher thread; keep what it attached (to detach it).
    fn stop_attacher(&mut self) {
        let Some(mut att) = self.attacher.take() else {
            return;
        };
        att.stop.store(true, Ordering::SeqCst);
        att.scan_tx = None;
        if let Some(h) = att.handle.take() {
            let _ = h.join();
        }
        while let Ok(ev) = att.events.try_recv() {
            if !matches!(ev, Event::ScanDone(_)) {
                self.apply(ev);
            }
        }
    }

    fn sync_inline(&mut self, ebpf: &mut Ebpf) -> Result<usize, TcError> {
        let mut added = 0;
        for si in 0..self.scopes.len() {
            let scope = self.scopes[si].clone();
            let _guard = match &scope.netns {
                Some(p) => Some(NetnsGuard::enter(p)?),
                None => None,
            };
            let present = interfaces();
            // Vanished interfaces: the kernel already dropped their tc state.
            let gone: Vec<(usize, u32)> = self
                .attached
                .keys()
                .filter(|(s, idx)| *s == si && !present.iter().any(|(_, i)| i == idx))
                .copied()
                .collect();
            for k in gone {
                if let Some(mut a) = self.attached.remove(&k) {
                    // Dropping detaches; errors are expected (device gone).
                    a.links.clear();
                }
            }
            for (name, idx) in present {
                if self.attached.contains_key(&(si, idx)) {
                    continue;
                }
                if !self.only.is_empty() && !self.only.contains(&name) {
                    continue;
                }
                match self.attach_one(ebpf, &name) {
                    Ok((links, created_qdisc)) => {
                        if created_qdisc && let Some(lock) = self.lock.as_mut() {
                            let q = QdiscRecord {
                                netns: scope.inode(),
                                ifindex: idx,
                                dev: name.clone(),
                            };
                            if let Err(e) = lock.note_qdisc(&q) {
                                log::warn!("recording the clsact qdisc of {name}: {e}");
                            }
                        }
                        self.attached.insert(
                            (si, idx),
                            Attachment {
                                scope: si,
                                iface: name,
                                links: Links::Aya(links),
                                created_qdisc,
                            },
                        );
                        added += 1;
                    }
                    Err(e) => self
                        .errors
                        .push(format!("tc on {name} in netns {}: {e}", scope.label)),
                }
            }
        }
        Ok(added)
    }

    fn attach_one(
        &self,
        ebpf: &mut Ebpf,
        iface: &str,
    ) -> Result<(Vec<SchedClassifierLink>, bool), TcError> {
        let mut created_qdisc = false;
        if self.mode == TcMode::Netlink {
            match qdisc_add_clsact(iface) {
                Ok(()) => created_qdisc = true,
                // EEXIST: a clsact qdisc is already there (someone else's).
                // Linux 6.1 answers with only its extack message,
                // "Exclusivity flag on, cannot modify" (qdisc_create() path
                // of tc_modify_qdisc() with NLM_F_EXCL).
                Err(e)
                    if e.to_string().contains("exists")
                        || e.to_string().contains("os error 17")
                        || e.to_string().contains("Exclusivity flag on") => {}
                Err(e) => return Err(TcError::AddClsact(e)),
            }
        }
        let mut links = Vec::new();
        for (prog_name, at) in [
            (INGRESS_PROG, TcAttachType::Ingress),
            (EGRESS_PROG, TcAttachType::Egress),
        ] {
            let prog: &mut SchedClassifier = ebpf
                .program_mut(prog_name)
                .ok_or(TcError::MissingProgram(prog_name))?
                .try_into()
                .map_err(|err| TcError::NotTc {
                    name: prog_name,
                    err,
                })?;
            let opts = match self.mode {
                TcMode::Tcx => TcAttachOptions::TcxOrder(LinkOrder::first()),
                // Priority 1 runs before other filters (a redirect would
                // otherwise take the packet before tracer sees it). Left to
                // the kernel (0), tcf_auto_prio() gives 49152 when the
                // chain has no filter in front, the priority the usual
                // `tc filter add` already took: tracer would run after it.
                TcMode::Netlink => TcAttachOptions::Netlink(NlOptions {
                    priority: 1,
                    ..Default::default()
                }),
            };
            let first = prog.attach_with_options(iface, at, opts);
            // Priority 1 held by another classifier kind: let the kernel pick.
            let first = match first {
                Err(_) if self.mode == TcMode::Netlink => prog.attach_with_options(
                    iface,
                    at,
                    TcAttachOptions::Netlink(NlOptions::default()),
                ),
                r => r,
            };
            let id = match first {
                Ok(id) => id,
                Err(e) => {
                    drop(links);
                    if created_qdisc && crate::node::tc::no_filters(iface) {
                        del_clsact(iface);
                    }
                    return Err(TcError::Attach {
                        name: prog_name,
                        err: e,
                    });
                }
            };
            links.push(prog.take_link(id).map_err(TcError::TakeLink)?);
        }
        Ok((links, created_qdisc))
    }

    /// Remove everything, each namespace from inside itself.
    pub fn detach_all(&mut self) -> Vec<String> {
        self.stop_attacher();
        let mut errors = Vec::new();
        let mut by_scope: HashMap<usize, Vec<(u32, Attachment)>> = HashMap::new();
        for ((_, ifindex), a) in self.attached.drain() {
            by_scope.entry(a.scope).or_default().push((ifindex, a));
        }
        // Qdiscs handed over to this tracer by others (recorded in its
        // lock file): ours to remove as well.
        let recorded = self
            .lock
            .as_ref()
            .map(TracerLock::qdiscs)
            .unwrap_or_default();
        for (si, atts) in by_scope {
            let scope = &self.scopes[si];
            let inode = scope.inode();
            let guard = match &scope.netns {
                Some(p) => match NetnsGuard::enter(p) {
                    Ok(g) => Some(g),
                    Err(e) => {
                        // The namespace is gone, and its interfaces with it.
                        errors.push(format!("netns {}: {e:#}", scope.label));
                        continue;
                    }
                },
                None => None,
            };
            for (ifindex, mut a) in atts {
                // tcx links go when their fd closes (here); netlink filters
                // are deleted by aya, in this namespace.
                a.links.clear();
                let q = QdiscRecord {
                    netns: inode,
                    ifindex,
                    dev: a.iface.clone(),
                };
                if a.created_qdisc
                    || recorded
                        .iter()
                        .any(|r| r.netns == inode && r.ifindex == ifindex)
                {
                    del_own_clsact(&q);
                }
            }
            drop(guard);
        }
        errors
    }
}

impl Drop for TcManager {
    fn drop(&mut self) {
        let _ = self.detach_all();
    }
}

/// Remove a clsact qdisc we created once our filters are off it, unless
/// another filter is on it (another tracer's, a user's): deleting the
/// qdisc would delete those too. Left, it is an empty clsact, which
/// changes nothing for packets.
/// When the filters left are another live tracer's, the qdisc is handed
/// over to it (kernel::tracer_lock), which removes it in turn.
fn del_own_clsact(q: &QdiscRecord) {
    let iface = q.dev.as_str();
    if crate::node::tc::no_filters(iface) {
        del_clsact(iface);
        return;
    }
    let progs = crate::node::tc::bpf_filters(iface)
        .unwrap_or_default()
        .into_iter()
        .map(|f| f.prog_id)
        .collect();
    if crate::kernel::tracer_lock::tracers().hand_over(&progs, q) {
        log::info!("left the clsact qdisc of {iface} to the tracer whose filters are on it");
    } else {
        log::info!("left the clsact qdisc of {iface}: other filters are on it");
    }
}

/// Remove a clsact qdisc, by RTM_DELQDISC (aya 0.14 has no qdisc delete
/// call). An interface already gone took its qdisc along.
fn del_clsact(iface: &str) {
    match crate::node::tc::del_clsact(iface) {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ENOENT)) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => log::warn!(
            "deleting the clsact qdisc of {iface}: {e}; it may remain (`tracer cleanup` removes it)"
        ),
    }
}

/// The attacher thread (tcx mode): lists the scopes' interfaces every
/// [`SCAN_EVERY`] (and when `sync` asks), attaches to new ones one at a
/// time, reports vanished ones. Interfaces found by a later listing go to
/// the front of the queue: a pod created while the start-up backlog of a
/// large node is still being worked through is hooked within a listing and
/// an attach, not after the backlog.
struct Worker {
    scopes: Vec<TcScope>,
    only: Vec<String>,
    ingress: OwnedFd,
    egress: OwnedFd,
    /// Interfaces attached (true) or failed (false, not retried), by
    /// (scope, ifindex).
    known: HashMap<(usize, u32), bool>,
    /// Found, not yet attached: (scope, ifindex, name).
    queue: VecDeque<(usize, u32, String)>,
    live: Arc<AtomicUsize>,
    /// Scopes whose namespace could not be entered (reported once).
    scope_failed: HashSet<usize>,
    stop: Arc<AtomicBool>,
    events: Sender<Event>,
}

impl Worker {
    fn run(&mut self, scans: Receiver<u64>) {
        let mut last_list: Option<Instant> = None;
        // A scan asked for, answered once the queue it filled is drained.
        let mut to_answer: Option<u64> = None;
        loop {
            let due = last_list.map_or(Duration::ZERO, |t| SCAN_EVERY.saturating_sub(t.elapsed()));
            let wait = if self.queue.is_empty() {
                due
            } else {
                Duration::ZERO
            };
            let mut asked = match scans.recv_timeout(wait) {
                Ok(n) => Some(n),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            while let Ok(n) = scans.try_recv() {
                asked = Some(n);
            }
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            if asked.is_some() || last_list.is_none_or(|t| t.elapsed() >= SCAN_EVERY) {
                if !self.list(last_list.is_none()) {
                    return;
                }
                last_list = Some(Instant::now());
                if asked.is_some() {
                    to_answer = asked;
                }
            }
            if let Some((si, ifindex, iface)) = self.queue.pop_front()
                && !self.attach(si, ifindex, iface)
            {
                return;
            }
            if self.queue.is_empty()
                && let Some(n) = to_answer.take()
                && self.events.send(Event::ScanDone(n)).is_err()
            {
                return;
            }
        }
    }

    /// List every scope: queue new interfaces (at the back on the first
    /// listing, at the front later), forget vanished ones. False when
    /// nobody listens any more.
    fn list(&mut self, first: bool) -> bool {
        for si in 0..self.scopes.len() {
            let _guard = match self.enter(si) {
                Ok(g) => g,
                Err(alive) => {
                    if alive {
                        continue;
                    }
                    return false;
                }
            };
            let present = interfaces();
            let is_present = |idx: &u32| present.iter().any(|(_, i)| i == idx);
            let gone: Vec<(usize, u32)> = self
                .known
                .keys()
                .filter(|(s, idx)| *s == si && !is_present(idx))
                .copied()
                .collect();
            for (scope, ifindex) in gone {
                if self.known.remove(&(scope, ifindex)) == Some(true) {
                    self.live.fetch_sub(1, Ordering::SeqCst);
                }
                if self.events.send(Event::Gone { scope, ifindex }).is_err() {
                    return false;
                }
            }
            self.queue.retain(|(s, idx, _)| *s != si || is_present(idx));
            for (iface, ifindex) in present {
                if self.known.contains_key(&(si, ifindex))
                    || self.queue.iter().any(|(s, i, _)| *s == si && *i == ifindex)
                    || (!self.only.is_empty() && !self.only.contains(&iface))
                {
                    continue;
                }
                if first {
                    self.queue.push_back((si, ifindex, iface));
                } else {
                    self.queue.push_front((si, ifindex, iface));
                }
            }
        }
        true
    }

    /// Enter scope `si`'s namespace on this thread. Err(true): it cannot
    /// be entered (reported once), Err(false): nobody listens any more.
    fn enter(&mut self, si: usize) -> std::result::Result<Option<NetnsGuard>, bool> {
        let Some(p) = &self.scopes[si].netns else {
            return Ok(None);
        };
        match NetnsGuard::enter(p) {
            Ok(g) => Ok(Some(g)),
            Err(e) => {
                if self.scope_failed.insert(si) {
                    let error = format!("{e:#}");
                    if self
                        .events
                        .send(Event::ScopeError { scope: si, error })
                        .is_err()
                    {
                        return Err(false);
                    }
                }
                Err(true)
            }
        }
    }

    /// Hook one interface and report it; false when nobody listens.
    fn attach(&mut self, si: usize, ifindex: u32, iface: String) -> bool {
        let _guard = match self.enter(si) {
            Ok(g) => g,
            Err(alive) => return alive,
        };
        let ev = match attach_tcx(self.ingress.as_fd(), self.egress.as_fd(), ifindex) {
            Ok(links) => Event::Attached {
                scope: si,
                ifindex,
                iface,
                links,
            },
            // Gone since the listing: the next one forgets it.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return true,
            Err(e) => Event::Failed {
                scope: si,
                iface,
                error: e.to_string(),
            },
        };
        let ok = matches!(ev, Event::Attached { .. });
        self.known.insert((si, ifindex), ok);
        if ok {
            self.live.fetch_add(1, Ordering::SeqCst);
        }
        // Nobody to hand the links to: dropping them detaches.
        self.events.send(ev).is_ok()
    }
}

const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_TCX_INGRESS: u32 = 46;
const BPF_TCX_EGRESS: u32 = 47;
/// Before `relative_fd`; with none (0), before every program: first.
const BPF_F_BEFORE: u32 = 1 << 3;

/// The head of `union bpf_attr` for BPF_LINK_CREATE with tcx options
/// (`link_create` and its `tcx` member); the kernel takes the rest as 0.
#[repr(C)]
struct LinkCreateTcx {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    relative_fd: u32,
    _pad: u32,
    expected_revision: u64,
}

/// One tcx link, first in the chain (what aya's
/// `TcAttachOptions::TcxOrder(LinkOrder::first())` asks for), as a plain
/// fd so that another thread than the owner of the `Ebpf` can make it.
fn tcx_link_create(prog: BorrowedFd, ifindex: u32, attach_type: u32) -> std::io::Result<OwnedFd> {
    let attr = LinkCreateTcx {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type,
        flags: BPF_F_BEFORE,
        relative_fd: 0,
        _pad: 0,
        expected_revision: 0,
    };
    // SAFETY: attr is a valid, fully initialised prefix of bpf_attr of the
    // size passed; the kernel only reads it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_CREATE,
            &raw const attr,
            std::mem::size_of::<LinkCreateTcx>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd (O_CLOEXEC, bpf_link_prime()) that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

/// Both directions on one interface; on failure nothing stays attached.
fn attach_tcx(
    ingress: BorrowedFd,
    egress: BorrowedFd,
    ifindex: u32,
) -> std::io::Result<Vec<OwnedFd>> {
    let i = tcx_link_create(ingress, ifindex, BPF_TCX_INGRESS)?;
    // On error `i` drops here, which detaches it.
    let e = tcx_link_create(egress, ifindex, BPF_TCX_EGRESS)?;
    Ok(vec![i, e])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcx_attr_matches_the_kernel_layout() {
        // link_create: prog_fd, target_ifindex, attach_type, flags at 0..16;
        // tcx.relative_fd at 16, tcx.expected_revision (aligned u64) at 24.
        assert_eq!(std::mem::size_of::<LinkCreateTcx>(), 32);
        assert_eq!(std::mem::offset_of!(LinkCreateTcx, relative_fd), 16);
        assert_eq!(std::mem::offset_of!(LinkCreateTcx, expected_revision), 24);
    }

    #[test]
    fn background_only_for_the_own_namespace_without_an_allow_list() {
        let own = TcScope {
            netns: None,
            keep: None,
            label: "host".into(),
        };
        let other = TcScope {
            netns: Some("/run/netns/x".into()),
            keep: None,
            label: "x".into(),
        };
        assert!(TcManager::new(TcMode::Tcx, vec![own.clone()], vec![]).background);
        assert!(!TcManager::new(TcMode::Tcx, vec![own.clone()], vec!["eth0".into()]).background);
        assert!(!TcManager::new(TcMode::Tcx, vec![own, other], vec![]).background);
    }

    #[test]
    fn attaching_to_a_missing_interface_fails_cleanly() {
        // No program fd: EBADF from the kernel (or EPERM unprivileged),
        // never a panic or a leaked fd.
        let devnull = std::fs::File::open("/dev/null").unwrap();
        let r = attach_tcx(devnull.as_fd(), devnull.as_fd(), u32::MAX);
        assert!(r.is_err());
    }
}
