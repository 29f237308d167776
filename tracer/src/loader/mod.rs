//! Loading the kernel programs with this kernel's offsets and the filter,
//! attaching the hooks of the probe registry, and reading counters.

pub mod probes;
pub mod tc;

use anyhow::{Context, Result, anyhow, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::BtfTracePoint,
};
use tracer_common::{FilterConfig, KernelOffsets, stat};

use self::probes::ProbeStatus;

/// The kernel object, built by build.rs.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer"));

pub fn load(filter: &FilterConfig, offsets: &KernelOffsets, netns: &[u32]) -> Result<Ebpf> {
    let btf = aya::Btf::from_sys_fs().context("read kernel BTF for program loading")?;
    let mut ebpf = EbpfLoader::new()
        .btf(Some(&btf))
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
    for name in [tc::INGRESS_PROG, tc::EGRESS_PROG] {
        let prog: &mut aya::programs::SchedClassifier = ebpf
            .program_mut(name)
            .ok_or_else(|| anyhow!("program {name} missing from the object"))?
            .try_into()?;
        prog.load()
            .map_err(|e| anyhow!("load {name}: {}", verifier_summary(&e)))?;
    }
    Ok(ebpf)
}

/// Load and attach every tracepoint of the plan. A required hook that fails
/// is an error; others are reported in their status.
pub fn attach_tracepoints(ebpf: &mut Ebpf, plan: &mut [ProbeStatus]) -> Result<()> {
    let btf = aya::Btf::from_sys_fs().context("read kernel BTF")?;
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
        let spec = probes::TRACEPOINTS
            .iter()
            .find(|p| p.hook == st.hook)
            .expect("plan comes from the registry");
        let res: Result<()> = (|| {
            let prog: &mut BtfTracePoint = ebpf
                .program_mut(spec.program)
                .ok_or_else(|| anyhow!("program {} missing from the object", spec.program))?
                .try_into()?;
            prog.load(spec.tracepoint, &btf)
                .map_err(|e| anyhow!("load: {}", verifier_summary(&e)))?;
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
    }
}
