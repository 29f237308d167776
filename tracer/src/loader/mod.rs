//! Loading the kernel programs with this kernel's offsets and the filter,
//! attaching the hooks of the probe registry, and reading counters.

pub mod probes;
pub mod tc;

use anyhow::{Result, anyhow, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, Program},
};
use tracer_common::{FilterConfig, KernelOffsets, stat};

use self::probes::ProbeStatus;

/// The kernel object, built by build.rs.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer"));

pub fn load(
    filter: &FilterConfig,
    offsets: &KernelOffsets,
    netns: &[u32],
    btf: &aya::Btf,
    ring_bytes: u32,
) -> Result<Ebpf> {
    let mut ebpf = EbpfLoader::new()
        .btf(Some(btf))
        // A ring buffer map's max_entries is its size in bytes.
        .map_max_entries("EVENTS", ring_bytes)
        .override_global("FILTER", filter, true)
        .override_global("OFFSETS", offsets, true)
        .load(EBPF_OBJECT)
        .map_err(|e| anyhow!("load eBPF object: {e}"))?;
    if filter.netns_filter != 0 {
        let mut m: BpfHashMap<&mut MapData, u32, u8> = BpfHashMap::try_from(
            ebpf.map_mut("NETNS")
                .ok_or_else(|| anyhow!("NETNS map missing"))?,
        )?;
        for ino in netns {
            m.insert(ino, 1, 0)?;
        }
    }
    Ok(ebpf)
}

/// Load (verify) the tc programs and every tracepoint of the plan.
/// Verification dominates start-up and the kernel verifies programs
/// independently, so they are loaded from as many threads as there are CPUs.
/// A required hook that fails is an error; others are reported in the plan.
pub fn load_programs(ebpf: &mut Ebpf, plan: &mut [ProbeStatus], btf: &aya::Btf) -> Result<()> {
    let mut jobs: Vec<(&str, &mut Program)> = ebpf
        .programs_mut()
        .filter(|(name, _)| {
            *name == tc::INGRESS_PROG
                || *name == tc::EGRESS_PROG
                || plan.iter().any(|st| {
                    st.backend == "tp_btf"
                        && probes::TRACEPOINTS
                            .iter()
                            .any(|p| p.hook == st.hook && p.program == *name)
                })
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
    jobs.sort_by_key(|(n, _)| !heavy(n));
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let queue = std::sync::Mutex::new(jobs.into_iter());
    let results: Vec<(String, Result<()>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let next = queue.lock().expect("queue").next();
                        let Some((name, prog)) = next else { break };
                        let t0 = std::time::Instant::now();
                        let r = load_one(name, prog, btf);
                        log::debug!("verified {name} in {:?}", t0.elapsed());
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
    for (name, r) in results {
        let Err(e) = r else { continue };
        if name == tc::INGRESS_PROG || name == tc::EGRESS_PROG {
            return Err(e.context(format!("load {name}")));
        }
        let spec = probes::TRACEPOINTS.iter().find(|p| p.program == name);
        if let Some(st) = spec.and_then(|sp| plan.iter_mut().find(|st| st.hook == sp.hook)) {
            st.error = Some(format!("load: {e:#}"));
            if st.required {
                bail!("required hook {} failed to load: {e:#}", st.hook);
            }
        }
    }
    Ok(())
}

fn load_one(name: &str, prog: &mut Program, btf: &aya::Btf) -> Result<()> {
    match prog {
        Program::SchedClassifier(p) => p.load().map_err(|e| anyhow!(verifier_summary(&e))),
        Program::BtfTracePoint(p) => {
            let spec = probes::TRACEPOINTS
                .iter()
                .find(|s| s.program == name)
                .ok_or_else(|| anyhow!("{name} is not in the probe registry"))?;
            p.load(spec.tracepoint, btf)
                .map_err(|e| anyhow!(verifier_summary(&e)))
        }
        _ => bail!("unexpected program type for {name}"),
    }
}

/// Attach the loaded tracepoints of the plan.
pub fn attach_tracepoints(ebpf: &mut Ebpf, plan: &mut [ProbeStatus]) -> Result<()> {
    for st in plan.iter_mut() {
        if st.backend == "none" {
            if st.required {
                bail!(
                    "required hook {} unavailable: {}",
                    st.hook,
                    st.error.clone().unwrap_or_default()
                );
            }
            continue;
        }
        if st.error.is_some() {
            continue;
        }
        let spec = probes::TRACEPOINTS
            .iter()
            .find(|p| p.hook == st.hook)
            .expect("plan comes from the registry");
        let res: Result<()> = (|| {
            let prog: &mut BtfTracePoint = ebpf
                .program_mut(spec.program)
                .ok_or_else(|| anyhow!("program {} missing from the object", spec.program))?
                .try_into()?;
            prog.attach().map_err(|e| anyhow!("attach: {e}"))?;
            Ok(())
        })();
        match res {
            Ok(()) => st.attached = true,
            Err(e) => {
                st.error = Some(format!("{e:#}"));
                if st.required {
                    bail!("required hook {} failed: {e:#}", st.hook);
                }
            }
        }
    }
    Ok(())
}

/// The verifier log is long; keep its last lines.
fn verifier_summary(e: &aya::programs::ProgramError) -> String {
    let s = format!("{e:?}");
    let lines: Vec<&str> = s.lines().collect();
    if lines.len() > 12 {
        lines[lines.len() - 12..].join("\n")
    } else {
        s
    }
}

pub fn ring(ebpf: &mut Ebpf) -> Result<RingBuf<MapData>> {
    let map = ebpf
        .take_map("EVENTS")
        .ok_or_else(|| anyhow!("EVENTS map missing"))?;
    Ok(RingBuf::try_from(map)?)
}

/// Kernel-side counters summed over CPUs.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Counters {
    pub events: u64,
    pub lost: u64,
    pub track_fail: u64,
    pub filtered: u64,
    pub flowkey_fail: u64,
    pub stale: u64,
}

pub fn counters(ebpf: &Ebpf) -> Counters {
    let Some(map) = ebpf.map("STATS") else {
        return Counters::default();
    };
    let Ok(arr) = PerCpuArray::<&MapData, u64>::try_from(map) else {
        return Counters::default();
    };
    let sum = |i: u32| -> u64 { arr.get(&i, 0).map(|v| v.iter().sum()).unwrap_or(0) };
    Counters {
        events: sum(stat::EVENTS),
        lost: sum(stat::LOST),
        track_fail: sum(stat::TRACK_FAIL),
        filtered: sum(stat::FILTERED),
        flowkey_fail: sum(stat::FLOWKEY_FAIL),
        stale: sum(stat::STALE),
    }
}
