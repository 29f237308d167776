//! Loading the kernel programs with this kernel's offsets and the filter,
//! attaching the hooks of the probe registry, and reading counters.

pub mod probes;
pub mod tc;

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, MapData, MapError, PerCpuArray, RingBuf},
    programs::{Program, ProgramError},
};
use tracer_common::{FilterConfig, KernelOffsets, stat};

use self::probes::{Backend, KernelCaps, ProbeStatus};
use crate::kernel::error_chain;

/// Why the kernel object or one of its programs could not be loaded or
/// attached. aya's errors are part of the message with their causes
/// ([`error_chain`]), except where a `source` is kept: these messages
/// also go into hooks' fallback reasons, made with `{e}`.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "this tracer was built without its kernel programs (AYA_BUILD_SKIP=1): build it with `cargo xtask build`"
    )]
    NoObject,
    #[error("load eBPF object: {0}")]
    Object(aya::EbpfError),
    #[error("{0} map missing")]
    MissingMap(&'static str),
    #[error("fill the NETNS map: {}", error_chain(.0))]
    NetnsMap(MapError),
    #[error("open the EVENTS ring buffer: {}", error_chain(.0))]
    RingMap(MapError),
    #[error("program {0} missing from the object")]
    MissingProgram(String),
    #[error("program {name} cannot be loaded as {target}")]
    WrongTarget { name: String, target: String },
    /// The verifier log's last lines, or the kernel's refusal
    /// ([`verifier_summary`]).
    #[error("{0}")]
    Verifier(String),
    /// A tc program failed to load: nothing is traced without them.
    #[error("load {name}: {why}")]
    TcProgram { name: String, why: String },
    #[error("required hook {hook} failed to load: {why}")]
    RequiredLoad { hook: String, why: String },
    #[error("required hook {hook} unavailable: {why}")]
    RequiredUnavailable { hook: String, why: String },
    #[error("required hook {hook} failed: {why}")]
    RequiredAttach { hook: String, why: String },
    /// `why`: aya's error with its causes ([`error_chain`]).
    #[error("attach {name}: {why}")]
    Attach { name: String, why: String },
    #[error("attach {name} to {func}: {why}")]
    AttachTo {
        name: String,
        func: String,
        why: String,
    },
    #[error("none of {0} in kallsyms")]
    NoSymbol(String),
    #[error("unexpected program type for {0}")]
    UnexpectedType(String),
}

/// The kernel object, built by build.rs.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer"));

/// TRACER_EMPTY_PROGRAMS=1: load every kernel program with an immediate
/// return (EMPTY_PROGRAMS in tracer-ebpf), attached as usual. Nothing is
/// traced; `cargo xtask bench` uses it to measure what the hooks cost by
/// themselves, apart from what tracer's programs do in them.
pub fn empty_programs() -> bool {
    std::env::var_os("TRACER_EMPTY_PROGRAMS").is_some_and(|v| v == "1")
}

/// AYA_LOG_LEVEL for the kernel programs (aya_log_common::Level: Off is 0,
/// Debug is 4).
fn debug_level(on: bool) -> u8 {
    if on { 4 } else { 0 }
}

/// A build without the kernel programs (AYA_BUILD_SKIP=1, for the unit
/// tests on the stable toolchain alone) cannot trace: say so, once.
fn object() -> Result<&'static [u8], LoadError> {
    if EBPF_OBJECT.is_empty() {
        return Err(LoadError::NoObject);
    }
    Ok(EBPF_OBJECT)
}

/// Load the object (maps created, globals set; programs not yet
/// verified) against the kernel BTF `btf` (the caller's parse, which the
/// program loads use too: aya's `EbpfLoader::new()` would parse
/// /sys/kernel/btf/vmlinux once more, ~0.4 s under emulation, and only
/// one parse is alive at a time either way).
pub fn load(
    filter: &FilterConfig,
    offsets: &KernelOffsets,
    netns: &[u32],
    btf: &aya::Btf,
    ring_bytes: u32,
    debug_bpf: bool,
) -> Result<Ebpf, LoadError> {
    let mut loader = EbpfLoader::new();
    loader.btf(Some(btf));
    let mut ebpf = loader
        // A ring buffer map's max_entries is its size in bytes.
        .map_max_entries("EVENTS", ring_bytes)
        .override_global("FILTER", filter, true)
        .override_global("OFFSETS", offsets, true)
        .override_global("EMPTY_PROGRAMS", &u8::from(empty_programs()), true)
        // aya-log-ebpf's level: Off unless --debug-bpf (debug.rs in
        // tracer-ebpf); Off makes every log call dead code to the verifier.
        .override_global("AYA_LOG_LEVEL", &debug_level(debug_bpf), true)
        .load(object()?)
        .map_err(LoadError::Object)?;
    if filter.netns_filter != 0 {
        let mut m: BpfHashMap<&mut MapData, u32, u8> = BpfHashMap::try_from(
            ebpf.map_mut("NETNS")
                .ok_or(LoadError::MissingMap("NETNS"))?,
        )
        .map_err(LoadError::NetnsMap)?;
        for ino in netns {
            m.insert(ino, 1, 0).map_err(LoadError::NetnsMap)?;
        }
    }
    Ok(ebpf)
}

/// Can this kernel load fentry programs at all? Loads the object with the
/// default globals and verifies one small fentry program (ip_forward).
/// None when it can; else why not (lockdown, no BTF trampolines, not root).
pub fn fentry_trial() -> Option<String> {
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: fentry not tried".into());
    }
    let btf = match aya::Btf::parse_file(
        crate::kernel::btf::vmlinux_path(),
        aya::Endianness::default(),
    ) {
        Ok(b) => b,
        Err(e) => return Some(format!("read BTF: {e}")),
    };
    let obj = match object() {
        Ok(o) => o,
        Err(e) => return Some(e.to_string()),
    };
    let mut ebpf = match EbpfLoader::new()
        .btf(Some(&btf))
        .override_global("AYA_LOG_LEVEL", &debug_level(false), true)
        .load(obj)
    {
        Ok(e) => e,
        Err(e) => return Some(format!("load object: {e}")),
    };
    let name = "tracer_fe_ip_forward";
    let prog = ebpf.program_mut(name)?;
    load_one(name, prog, &Target::Traced("ip_forward".into()), &btf)
        .err()
        .map(|e| format!("fentry trial load failed: {}", first_line(&e)))
}

/// How a program is loaded: tp_btf and fentry/fexit programs are verified
/// against their target's BTF.
#[derive(Debug, Clone)]
enum Target {
    Tc,
    TpBtf(String),
    Kprobe,
    Traced(String),
}

fn target_of(st: &ProbeStatus) -> Target {
    let spec = probes::spec(&st.hook).expect("plan comes from the registry");
    match st.backend() {
        Backend::TpBtf => Target::TpBtf(spec.tracepoint.map(|t| t.0).unwrap_or_default().into()),
        Backend::Fentry => Target::Traced(spec.funcs.first().copied().unwrap_or_default().into()),
        _ => Target::Kprobe,
    }
}

/// Load (verify) the tc programs and the programs of every hook's planned
/// backend. Verification dominates start-up and the kernel verifies programs
/// independently, so they are loaded from as many threads as there are CPUs.
/// A hook whose programs fail to load falls back to its next backend. A
/// required hook that ends with none is an error.
pub fn load_programs(
    ebpf: &mut Ebpf,
    plan: &mut [ProbeStatus],
    caps: &mut KernelCaps,
    btf: &aya::Btf,
) -> Result<(), LoadError> {
    // fentry either works on this kernel or not at all (lockdown, no
    // trampoline support): one trial load decides for every hook.
    if let Some(st) = plan.iter().find(|s| s.backend() == Backend::Fentry) {
        let name = st.programs()[0];
        let t = target_of(st);
        if let Some(prog) = ebpf.program_mut(name)
            && let Err(e) = load_one(name, prog, &t, btf)
        {
            let why = format!("fentry trial load failed: {}", first_line(&e));
            caps.fentry_error = Some(why.clone());
            for st in plan.iter_mut().filter(|s| s.backend() == Backend::Fentry) {
                st.fall_back(why.clone());
            }
        }
    }
    let mut wanted: Vec<(String, Target)> = vec![
        (tc::INGRESS_PROG.into(), Target::Tc),
        (tc::EGRESS_PROG.into(), Target::Tc),
    ];
    // A hook left to tc (probes::leave_to_tc) is loaded only if tc fails
    // on an interface (attach_left): the device tracepoints' programs are
    // the largest the verifier checks (a second each under emulation).
    for st in plan.iter().filter(|st| !st.left_to_tc) {
        for p in st.programs() {
            wanted.push((p.to_string(), target_of(st)));
        }
    }
    let mut jobs: Vec<(&str, &mut Program, Target)> = ebpf
        .programs_mut()
        .filter_map(|(name, prog)| {
            let t = wanted.iter().find(|(n, _)| n == name)?.1.clone();
            // Already loaded by the fentry trial.
            (prog.fd().is_err()).then_some((name, prog, t))
        })
        .collect();
    // Heaviest first (the skb parsers), then a shared queue keeps every
    // thread busy until the end.
    let heavy = |n: &str| {
        [
            tc::INGRESS_PROG,
            tc::EGRESS_PROG,
            "tracer_netif_receive",
            "tracer_kfree_skb",
            "tracer_xmit",
        ]
        .contains(&n)
    };
    jobs.sort_by_key(|(n, _, _)| !heavy(n));
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .clamp(1, 8);
    let queue = std::sync::Mutex::new(jobs.into_iter());
    let results: Vec<(String, Result<(), LoadError>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let next = queue.lock().expect("queue").next();
                        let Some((name, prog, t)) = next else { break };
                        let t0 = std::time::Instant::now();
                        let r = load_one(name, prog, &t, btf);
                        // The verifier's work: what makes a start slow
                        // on older kernels (bpf_prog_info.verified_insns).
                        let insns = prog
                            .info()
                            .ok()
                            .and_then(|i| i.verified_instruction_count());
                        log::debug!("verified {name} in {:?} ({insns:?} insns)", t0.elapsed());
                        done.push((name.to_string(), r));
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("loader thread"))
            .collect()
    });
    let mut failed_hooks = Vec::new();
    for (name, r) in results {
        let Err(e) = r else { continue };
        if name == tc::INGRESS_PROG || name == tc::EGRESS_PROG {
            return Err(LoadError::TcProgram {
                name,
                why: e.to_string(),
            });
        }
        if let Some(st) = plan
            .iter_mut()
            .find(|st| st.programs().contains(&name.as_str()))
        {
            failed_hooks.push(st.hook.clone());
            let keep_going = st.fall_back(format!("load {name}: {e}"));
            if !keep_going && st.required {
                return Err(LoadError::RequiredLoad {
                    hook: st.hook.clone(),
                    why: e.to_string(),
                });
            }
        }
    }
    // Fallbacks load one by one (rare).
    for hook in failed_hooks {
        let st = plan.iter_mut().find(|s| s.hook == hook).expect("hook");
        ensure_loaded(ebpf, st, btf)?;
    }
    Ok(())
}

/// Load the current backend's programs of `st`, falling back until one
/// backend loads or none is left.
fn ensure_loaded(ebpf: &mut Ebpf, st: &mut ProbeStatus, btf: &aya::Btf) -> Result<(), LoadError> {
    while st.backend() != Backend::None {
        let t = target_of(st);
        let mut err = None;
        for name in st.programs() {
            let prog = ebpf
                .program_mut(name)
                .ok_or_else(|| LoadError::MissingProgram(name.into()))?;
            if prog.fd().is_ok() {
                continue;
            }
            if let Err(e) = load_one(name, prog, &t, btf) {
                err = Some(format!("load {name}: {e}"));
                break;
            }
        }
        match err {
            None => return Ok(()),
            Some(e) => {
                if !st.fall_back(e.clone()) && st.required {
                    return Err(LoadError::RequiredLoad {
                        hook: st.hook.clone(),
                        why: e,
                    });
                }
            }
        }
    }
    Ok(())
}

fn first_line(e: &LoadError) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

fn load_one(name: &str, prog: &mut Program, t: &Target, btf: &aya::Btf) -> Result<(), LoadError> {
    let r = match (prog, t) {
        (Program::SchedClassifier(p), _) => p.load(),
        (Program::BtfTracePoint(p), Target::TpBtf(tp)) => p.load(tp, btf),
        // A classic tracepoint (a syscall's) rides along with its hook's
        // tp_btf program (probes::ProbeSpec::syscalls).
        (Program::TracePoint(p), _) => p.load(),
        (Program::KProbe(p), _) => p.load(),
        (Program::FEntry(p), Target::Traced(f)) => p.load(f, btf),
        (Program::FExit(p), Target::Traced(f)) => p.load(f, btf),
        (_, t) => {
            return Err(LoadError::WrongTarget {
                name: name.into(),
                target: format!("{t:?}"),
            });
        }
    };
    r.map_err(|e| LoadError::Verifier(verifier_summary(&e)))
}

/// Attach every hook of the plan, falling back to the next backend (loading
/// its programs) when attaching fails.
pub fn attach_hooks(
    ebpf: &mut Ebpf,
    plan: &mut [ProbeStatus],
    caps: &KernelCaps,
    btf: &aya::Btf,
) -> Result<(), LoadError> {
    for st in plan.iter_mut().filter(|st| !st.left_to_tc) {
        loop {
            if st.backend() == Backend::None {
                if st.required {
                    return Err(LoadError::RequiredUnavailable {
                        hook: st.hook.clone(),
                        why: st.error.clone().unwrap_or_default(),
                    });
                }
                break;
            }
            ensure_loaded(ebpf, st, btf)?;
            if st.backend() == Backend::None {
                continue;
            }
            match attach_one(ebpf, st, caps) {
                Ok(()) => {
                    st.attached = true;
                    st.error = None;
                    break;
                }
                Err(e) => {
                    if !st.fall_back(e.to_string()) && st.required {
                        return Err(LoadError::RequiredAttach {
                            hook: st.hook.clone(),
                            why: e.to_string(),
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

/// Attach hooks given back by tc ([`probes::tc_failed`]) while tracing:
/// their programs were loaded at start, so no BTF is needed.
pub fn attach_left(
    ebpf: &mut Ebpf,
    plan: &mut [ProbeStatus],
    caps: &KernelCaps,
    hooks: &[String],
    btf: &aya::Btf,
) -> Vec<String> {
    let mut errors = Vec::new();
    for st in plan.iter_mut().filter(|st| hooks.contains(&st.hook)) {
        // Not loaded at start (load_programs leaves hooks left to tc).
        if let Err(e) = ensure_loaded(ebpf, st, btf) {
            st.error = Some(e.to_string());
            errors.push(format!("hook {}: {e}", st.hook));
            continue;
        }
        match attach_one(ebpf, st, caps) {
            Ok(()) => st.attached = true,
            Err(e) => {
                st.error = Some(e.to_string());
                errors.push(format!("hook {}: {e}", st.hook));
            }
        }
    }
    errors
}

/// A link made by `attach_one`, kept so that a backend that attached only
/// some of its programs (fentry attached, its fexit refused) is taken off
/// again before the next backend is tried: otherwise both would report.
enum Attached {
    Tp(&'static str, aya::programs::tp_btf::BtfTracePointLinkId),
    Fentry(&'static str, aya::programs::fentry::FEntryLinkId),
    Fexit(&'static str, aya::programs::fexit::FExitLinkId),
    Kprobe(&'static str, aya::programs::kprobe::KProbeLinkId),
    Classic(&'static str, aya::programs::trace_point::TracePointLinkId),
}

fn attach_one(ebpf: &mut Ebpf, st: &ProbeStatus, caps: &KernelCaps) -> Result<(), LoadError> {
    let mut done = Vec::new();
    let r = attach_programs(ebpf, st, caps, &mut done);
    if r.is_err() {
        for a in done {
            undo(ebpf, a);
        }
    }
    r
}

fn undo(ebpf: &mut Ebpf, a: Attached) {
    let name = match &a {
        Attached::Tp(n, _)
        | Attached::Fentry(n, _)
        | Attached::Fexit(n, _)
        | Attached::Kprobe(n, _)
        | Attached::Classic(n, _) => *n,
    };
    let r = match (ebpf.program_mut(name), a) {
        (Some(Program::BtfTracePoint(p)), Attached::Tp(_, id)) => p.detach(id),
        (Some(Program::FEntry(p)), Attached::Fentry(_, id)) => p.detach(id),
        (Some(Program::FExit(p)), Attached::Fexit(_, id)) => p.detach(id),
        (Some(Program::KProbe(p)), Attached::Kprobe(_, id)) => p.detach(id),
        (Some(Program::TracePoint(p)), Attached::Classic(_, id)) => p.detach(id),
        _ => return,
    };
    if let Err(e) = r {
        log::warn!("detach {name} after a partial attach: {}", error_chain(&e));
    }
}

fn attach_programs(
    ebpf: &mut Ebpf,
    st: &ProbeStatus,
    caps: &KernelCaps,
    done: &mut Vec<Attached>,
) -> Result<(), LoadError> {
    let spec = probes::spec(&st.hook).expect("plan comes from the registry");
    for name in st.programs() {
        let prog = ebpf
            .program_mut(name)
            .ok_or_else(|| LoadError::MissingProgram(name.into()))?;
        let err = |e: ProgramError| LoadError::Attach {
            name: name.into(),
            why: error_chain(&e),
        };
        match prog {
            Program::BtfTracePoint(p) => done.push(Attached::Tp(name, p.attach().map_err(err)?)),
            Program::FEntry(p) => done.push(Attached::Fentry(name, p.attach().map_err(err)?)),
            Program::FExit(p) => done.push(Attached::Fexit(name, p.attach().map_err(err)?)),
            Program::TracePoint(p) => {
                let (category, tp, _) = spec
                    .syscalls
                    .iter()
                    .find(|(_, _, n)| *n == name)
                    .ok_or_else(|| LoadError::UnexpectedType(name.into()))?;
                done.push(Attached::Classic(
                    name,
                    p.attach(category, tp).map_err(err)?,
                ));
            }
            Program::KProbe(p) => {
                let mut n = 0;
                for f in spec
                    .funcs
                    .iter()
                    .filter(|f| caps.symbols.iter().any(|s| s == *f))
                {
                    let id = p.attach(*f, 0).map_err(|e| LoadError::AttachTo {
                        name: name.into(),
                        func: (*f).into(),
                        why: error_chain(&e),
                    })?;
                    done.push(Attached::Kprobe(name, id));
                    n += 1;
                }
                if n == 0 {
                    return Err(LoadError::NoSymbol(spec.funcs.join(",")));
                }
            }
            _ => return Err(LoadError::UnexpectedType(name.into())),
        }
    }
    Ok(())
}

/// The verifier log is long; keep its last lines.
fn verifier_summary(e: &ProgramError) -> String {
    // An empty verifier log: the kernel refused before verifying (EPERM
    // under lockdown, EINVAL for an unknown attach target): say just that.
    if let ProgramError::LoadError {
        io_error,
        verifier_log,
    } = e
        && verifier_log.to_string().trim().is_empty()
    {
        return format!("the kernel refused the load: {io_error}");
    }
    let s = format!("{e:?}");
    let lines: Vec<&str> = s.lines().collect();
    if lines.len() > 12 {
        lines[lines.len() - 12..].join("\n")
    } else {
        s
    }
}

pub fn ring(ebpf: &mut Ebpf) -> Result<RingBuf<MapData>, LoadError> {
    let map = ebpf
        .take_map("EVENTS")
        .ok_or(LoadError::MissingMap("EVENTS"))?;
    RingBuf::try_from(map).map_err(LoadError::RingMap)
}

/// Kernel-side counters summed over CPUs.
#[derive(Debug, Default, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub events: u64,
    pub lost: u64,
    pub track_fail: u64,
    pub filtered: u64,
    pub flowkey_fail: u64,
    pub stale: u64,
    /// Packets counted instead of recorded (stat::COUNTED).
    pub counted: u64,
}

pub fn counters(ebpf: &Ebpf) -> Counters {
    let Some(map) = ebpf.map("STATS") else {
        return Counters::default();
    };
    let Ok(arr) = PerCpuArray::<&MapData, u64>::try_from(map) else {
        return Counters::default();
    };
    let sum = |i: u32| -> u64 { arr.get(&i, 0).map_or(0, |v| v.iter().sum()) };
    Counters {
        events: sum(stat::EVENTS),
        lost: sum(stat::LOST),
        track_fail: sum(stat::TRACK_FAIL),
        filtered: sum(stat::FILTERED),
        flowkey_fail: sum(stat::FLOWKEY_FAIL),
        stale: sum(stat::STALE),
        counted: sum(stat::COUNTED),
    }
}

#[cfg(test)]
mod object_tests {
    use object::{Object, ObjectSymbol};

    use super::{EBPF_OBJECT, probes::REGISTRY, tc};

    /// Every program the registry and the tc manager name is in the
    /// embedded object: a renamed program would otherwise only show as a
    /// hook that fails to load on some kernel.
    #[test]
    fn every_registry_program_is_in_the_object() {
        if cfg!(tracer_no_ebpf) {
            eprintln!(
                "\n!!!!! SKIPPED every_registry_program_is_in_the_object: built with AYA_BUILD_SKIP=1, no kernel object !!!!!\n"
            );
            return;
        }
        let obj = object::File::parse(EBPF_OBJECT).expect("the embedded eBPF object is ELF");
        let syms: std::collections::HashSet<&str> =
            obj.symbols().filter_map(|s| s.name().ok()).collect();
        let mut names = vec![tc::INGRESS_PROG, tc::EGRESS_PROG];
        for spec in REGISTRY {
            for p in [spec.fentry, spec.kprobe].into_iter().flatten() {
                names.push(p.entry);
                names.extend(p.ret);
            }
            names.extend(spec.tracepoint.map(|(_, prog)| prog));
        }
        assert!(names.len() > 20, "{names:?}");
        let missing: Vec<&&str> = names.iter().filter(|n| !syms.contains(**n)).collect();
        assert!(
            missing.is_empty(),
            "programs not in the object: {missing:?}"
        );
    }
}
