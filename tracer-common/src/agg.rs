//! In-kernel aggregation of a followed flow's steady-state packets.
//!
//! A followed packet used to cost one full record per hook. Now each
//! (packet tuple, direction, hook, device or drop site) key gets a budget of
//! [`AGG_BUDGET`] full records per CPU, then one more per
//! [`AGG_REFRESH_JIFFIES`]; packets beyond are only counted in the kernel's
//! `AGG` map, and userspace folds the counts into the flow (packet counts
//! and `counted_in_kernel`). Packets that change a flow's story are always
//! recorded in full: TCP SYN/FIN/RST, ICMP, unparsed headers. The last
//! key counted per hook and CPU sits in [`AggHot`], so that a bulk flow
//! costs a compare per hook rather than a hash lookup.

use crate::CtTuple;

/// Full records per key and CPU before packets are only counted.
pub const AGG_BUDGET: u32 = 8;
/// After the budget, one full record per key and CPU this often (in
/// jiffies: 0.256 s at HZ=1000, 1 s at HZ=250), so a long flow's timeline
/// keeps showing where it goes.
pub const AGG_REFRESH_JIFFIES: u64 = 256;
/// Keys kept (LRU): a key evicted with counts not yet read loses them, and
/// its budget starts again (more full records, never fewer).
pub const AGG_MAX: u32 = 16384;

/// Key of the `AGG` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AggKey {
    /// The packet as seen at the hook (after any NAT before it).
    pub tuple: CtTuple,
    /// Where: the struct net_device address for packet hooks, the drop
    /// location for drops, the nexthop (fib_nh_common) for route lookups.
    pub site: u64,
    /// Drops: the drop reason; route lookups: the table id; else 0.
    pub aux: u32,
    /// A [`crate::Hook`] as u8.
    pub hook: u8,
    /// 1 when the packet matched as a reply.
    pub reply: u8,
    pub _pad: [u8; 2],
}

/// Value of the `AGG` map (one per CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AggVal {
    /// Packets counted and not recorded.
    pub packets: u64,
    /// bpf_jiffies64() of the last full record.
    pub last_full: u64,
    /// Full records sent for this key on this CPU.
    pub full: u32,
    /// Where the full records were (ifindex and netns inode of the device).
    pub ifindex: u32,
    pub netns: u32,
    pub _pad: u32,
}

/// Slots of the per-CPU `AGG_HOT` array: one per [`crate::Hook`] number.
pub const AGG_HOT_SLOTS: u32 = 20;

/// One slot of `AGG_HOT`: the key this CPU last counted at that hook, and
/// its packets not yet moved to `AGG`. A bulk flow's next packet at the
/// same hook on the same CPU is counted here with a compare instead of a
/// hash lookup; the count moves to `AGG` when another key takes the slot.
/// Userspace adds `pending` to the key's `AGG` count.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AggHot {
    pub key: AggKey,
    /// bpf_jiffies64() from which the key's next full record is due (the
    /// slot is not used from then on); 0: empty slot.
    pub until: u64,
    pub pending: u64,
}

impl AggKey {
    pub const fn zeroed() -> Self {
        Self {
            tuple: CtTuple::zeroed(),
            site: 0,
            aux: 0,
            hook: 0,
            reply: 0,
            _pad: [0; 2],
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    unsafe impl aya::Pod for super::AggKey {}
    unsafe impl aya::Pod for super::AggVal {}
    unsafe impl aya::Pod for super::AggHot {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn agg_layout() {
        assert_eq!(size_of::<AggKey>(), 56);
        assert_eq!(offset_of!(AggKey, site), 40);
        assert_eq!(offset_of!(AggKey, aux), 48);
        assert_eq!(offset_of!(AggKey, hook), 52);
        assert_eq!(offset_of!(AggKey, reply), 53);
        assert_eq!(size_of::<AggVal>(), 32);
        assert_eq!(offset_of!(AggVal, full), 16);
        assert_eq!(offset_of!(AggVal, netns), 24);
        assert_eq!(size_of::<AggHot>(), 72);
        assert_eq!(offset_of!(AggHot, until), 56);
        assert!(crate::Hook::ALL.iter().all(|h| (*h as u32) < AGG_HOT_SLOTS));
    }
}
