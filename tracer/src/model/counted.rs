//! Folding the packets the kernel counted instead of recording (the `AGG`
//! map, tracer_common::agg) into the flow table.
//!
//! The map holds running totals per key and CPU, plus what each CPU's
//! per-hook slot (`AGG_HOT`) holds pending for its key; each poll folds
//! what grew since the last one. A poll can read a key's pending count
//! after it moved into `AGG` but `AGG` before it did: a total lower than
//! the last is such a short read, and counts nothing until it is exceeded.
//! A key absent from a poll (the kernel's LRU evicted it) starts again
//! from zero.

use std::collections::HashMap;

use tracer_common::{AggKey, Hook};

use crate::{model::event::Tuple, model::hop::Dir, model::table::FlowTable};

#[derive(Debug, Default)]
pub struct Counted {
    /// Totals folded so far, per key (only keys still in the map).
    last: HashMap<AggKey, u64>,
    /// Hook passages counted in the kernel, all flows.
    pub total: u64,
    /// Of those, passages of flows no longer (or never) in the table.
    pub unattributed: u64,
}

impl Counted {
    /// Whether a key's total was folded before: a key whose total is 0
    /// matters only then (the short-read rule), so a reader may skip the
    /// others (most keys of a full map never counted a packet).
    pub fn knows(&self, k: &AggKey) -> bool {
        self.last.contains_key(k)
    }

    /// One poll's totals `(key, total, netns)`.
    pub fn fold(
        &mut self,
        totals: impl IntoIterator<Item = (AggKey, u64, u32)>,
        flows: &mut FlowTable,
    ) {
        let mut last = HashMap::with_capacity(self.last.len());
        for (k, total, netns) in totals {
            let before = self.last.get(&k).copied().unwrap_or(0);
            // Less than before: a short read (see the module comment).
            let delta = total.saturating_sub(before);
            if total.max(before) > 0 {
                last.insert(k, total.max(before));
            }
            if delta == 0 {
                continue;
            }
            self.total += delta;
            let (Some(t), Some(hook)) = (Tuple::from_ct(&k.tuple), Hook::from_u8(k.hook)) else {
                self.unattributed += delta;
                continue;
            };
            let dir = if k.reply != 0 {
                Dir::Reply
            } else {
                Dir::Request
            };
            if !flows.fold_counted(&t, dir, hook, netns, delta) {
                self.unattributed += delta;
            }
        }
        self.last = last;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{model::event::tests::v4, model::names::Names, model::table::tests::pkt};
    use tracer_common::{CtTuple, PacketInfo};

    /// A table with one DNS flow recorded once at xmit: (table, flow id,
    /// the request packet).
    fn one_flow() -> (FlowTable, u64, PacketInfo) {
        let mut t = FlowTable::new(10);
        let req = v4([10, 0, 0, 1], 40000, [10, 0, 0, 2], 53, 17);
        let id = t
            .ingest(&pkt(Hook::Xmit, 1, 10, req), &mut Names::default())
            .unwrap();
        (t, id, req)
    }

    fn key(p: &PacketInfo, hook: Hook) -> AggKey {
        let mut k = AggKey::zeroed();
        k.tuple = CtTuple {
            saddr: p.saddr,
            daddr: p.daddr,
            sport: p.sport,
            dport: p.dport,
            proto: p.proto,
            family: p.family,
            _pad: [0; 2],
        };
        k.hook = hook as u8;
        k.reply = p.reply;
        k.site = 0xffff_8880_0000_2000;
        k
    }

    #[test]
    fn growth_is_folded_once_into_packets_and_replies() {
        let (mut t, id, req) = one_flow();
        let mut rep = v4([10, 0, 0, 2], 53, [10, 0, 0, 1], 40000, 17);
        rep.reply = 1;
        t.ingest(&pkt(Hook::NetifReceive, 2, 20, rep), &mut Names::default());
        let mut c = Counted::default();
        let (kq, kr) = (key(&req, Hook::TcEgress), key(&rep, Hook::NetifReceive));
        c.fold(vec![(kq, 10, 0), (kr, 4, 0)], &mut t);
        let f = t.get(id).unwrap();
        assert_eq!((f.packets, f.replies, f.counted), (2 + 14, 1 + 4, 14));
        // Only the growth counts on the next poll.
        c.fold(vec![(kq, 15, 0), (kr, 4, 0)], &mut t);
        let f = t.get(id).unwrap();
        assert_eq!((f.packets, f.replies, f.counted), (21, 5, 19));
        assert_eq!((c.total, c.unattributed), (19, 0));
    }

    #[test]
    fn a_recreated_key_counts_from_zero() {
        let (mut t, id, req) = one_flow();
        let mut c = Counted::default();
        let k = key(&req, Hook::Xmit);
        c.fold(vec![(k, 100, 0)], &mut t);
        // Evicted (absent from one poll), then re-created with 3.
        c.fold(vec![], &mut t);
        c.fold(vec![(k, 3, 0)], &mut t);
        assert_eq!(t.get(id).unwrap().counted, 103);
    }

    #[test]
    fn a_short_read_counts_nothing_until_exceeded() {
        let (mut t, id, req) = one_flow();
        let mut c = Counted::default();
        let k = key(&req, Hook::Xmit);
        c.fold(vec![(k, 150, 0)], &mut t);
        // 50 pending moved into AGG between the two reads: 100 seen.
        c.fold(vec![(k, 100, 0)], &mut t);
        assert_eq!(t.get(id).unwrap().counted, 150);
        c.fold(vec![(k, 160, 0)], &mut t);
        assert_eq!(t.get(id).unwrap().counted, 160);
    }

    #[test]
    fn route_lookups_count_but_are_not_packets() {
        let (mut t, id, req) = one_flow();
        let mut c = Counted::default();
        c.fold(vec![(key(&req, Hook::FibLookup), 7, 0)], &mut t);
        let f = t.get(id).unwrap();
        assert_eq!((f.packets, f.counted), (1, 7));
    }

    #[test]
    fn counts_of_unknown_flows_are_reported_as_unattributed() {
        let mut t = FlowTable::new(10);
        let mut c = Counted::default();
        let other = v4([10, 9, 0, 1], 1, [10, 9, 0, 2], 2, 17);
        c.fold(vec![(key(&other, Hook::Xmit), 5, 0)], &mut t);
        assert_eq!((c.total, c.unattributed), (5, 5));
    }
}
