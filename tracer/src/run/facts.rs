//! What the verdict rules may look up on the live node, per namespace,
//! read on demand: addresses and the IPVS table (in-process reads,
//! refreshed when older than half a second), tc filters, the owners of the
//! followed address, and netfilter counters, a dump of every rule (and a
//! helper process where legacy iptables tables are in use: seconds of CPU
//! on a node with a large ruleset), so only for a namespace where a
//! followed packet was dropped by netfilter, and at most every
//! [`NF_REFRESH`].

use crate::model::drop_reason::DropReason;
use std::{
    cell::RefCell,
    collections::HashMap,
    net::IpAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use crate::{
    model::flow::Flow,
    model::hop::HopData,
    model::names::Names,
    node::conntrack::{ConntrackTable, conntrack_in},
    node::ipvs::VirtualService,
    node::link::{LinkConf, links_in, nsids_in},
    node::netfilter::{self, NfRule},
    node::netns::{NetnsRef, addresses_in},
    node::nftrace::{NfTrace, NfTraced, TracedGoto},
    node::route::{RouteQuery, Routing, lookup_in, routing_in},
    node::services::{ServiceAddr, services_in},
    node::sockets::{Bound, ListenStats, bound_in, listen_stats_in},
    node::vip::VipWatch,
    run::pipeline::PreparedEnv,
    verdict::{
        AttachedProgram, CgroupPrograms, CgroupSkb, Env, Evidence, IfAddr, Inventory, Qdisc, Xfrm,
    },
};

struct NetnsFacts {
    at: Instant,
    addrs: Vec<IfAddr>,
    ipvs: Vec<VirtualService>,
    /// When read, and the DROP/REJECT rules whose counters moved.
    nf: Option<(Instant, Vec<(NfRule, u64)>)>,
    /// Devices' MTU and sysctls, read for a namespace where a followed
    /// packet was dropped.
    links: Option<Vec<LinkConf>>,
    /// Its bound sockets, read at the same time.
    bound: Vec<Bound>,
    /// Drops nf_tables tracing saw there, their rules named (read with
    /// the counters).
    traced: Vec<NfTraced>,
    /// The gotos nf_tables tracing saw followed packets take there.
    gotos: Vec<TracedGoto>,
    /// Its conntrack table, read with the netfilter counters.
    conntrack: Option<ConntrackTable>,
    /// Its listen-queue counters, read with its sockets.
    listen: Option<ListenStats>,
    /// Its routing rules and table sizes, read where a followed packet
    /// found no route.
    routing: Option<Routing>,
    /// When read, and the addresses and ports kube-proxy serves Services
    /// on there.
    services: Option<(Instant, Vec<ServiceAddr>)>,
    /// The newest hop (ts_ns) there of any flow when the facts above
    /// were read, and when its netfilter counters were: they are read
    /// again only for a hop newer than that ([`LiveEnv::prepare`]).
    read_to: u64,
    nf_read_to: u64,
}

/// How often netfilter counters of a namespace are read again while
/// tracing (the final report always reads them afresh).
const NF_REFRESH: Duration = Duration::from_secs(2);

/// How often kube-proxy's Services of a namespace are read again (they
/// change when the cluster's Services do; a large node's maps are
/// thousands of elements).
const SERVICES_REFRESH: Duration = Duration::from_secs(5);

pub struct LiveEnv {
    pub vip: VipWatch,
    cache: HashMap<u32, NetnsFacts>,
    paths: HashMap<u32, PathBuf>,
    tc: RefCell<HashMap<(u32, String), Vec<String>>>,
    /// BPF programs of others on devices where packets were dropped at a
    /// tc or XDP hook.
    dev_programs: RefCell<HashMap<(u32, String), Vec<AttachedProgram>>>,
    /// Cgroups of socket calls a program rewrote, with their programs.
    cgroups: RefCell<HashMap<u64, Option<CgroupPrograms>>>,
    /// The node's cgroup_skb programs, with the cgroups of the sockets
    /// asked about, where a drop may be theirs.
    cgroup_skb: RefCell<Option<CgroupSkb>>,
    /// Qdiscs of devices where a qdisc dropped.
    qdiscs: RefCell<HashMap<(u32, String), Vec<Qdisc>>>,
    /// IPsec policies and states of namespaces where one dropped.
    xfrm: RefCell<HashMap<u32, Option<Xfrm>>>,
    /// net.ipv4.ipfrag_time of namespaces where a reassembly timed out.
    frag_time: RefCell<HashMap<u32, Option<u32>>>,
    /// Device maps' entries XDP redirects went through.
    devmaps: RefCell<HashMap<(u32, u32), Option<u32>>>,
    /// Netfilter counters when tracing started, per namespace inode.
    nf_baseline: HashMap<u32, Vec<NfRule>>,
    /// nf_tables tracing, where it was set up (its tables go with it).
    nftrace: Option<NfTrace>,
    /// Per namespace inode, the ids it gives other namespaces (nsid ->
    /// inode, 0 for an id no known namespace has, node::link::nsids_in)
    /// and when they were asked: asked again for an id not seen yet (a new
    /// pod), or one not found at least NSIDS_RETRY ago; each asking is one
    /// query per namespace known.
    nsids: HashMap<u32, (HashMap<i32, u32>, Instant)>,
}

impl LiveEnv {
    pub fn new(
        vip: VipWatch,
        nf_baseline: HashMap<u32, Vec<NfRule>>,
        nftrace: Option<NfTrace>,
    ) -> LiveEnv {
        LiveEnv {
            vip,
            cache: HashMap::new(),
            paths: HashMap::new(),
            tc: RefCell::default(),
            dev_programs: RefCell::default(),
            cgroups: RefCell::default(),
            cgroup_skb: RefCell::default(),
            qdiscs: RefCell::default(),
            xfrm: RefCell::default(),
            frag_time: RefCell::default(),
            devmaps: RefCell::default(),
            nf_baseline,
            nftrace,
            nsids: HashMap::new(),
        }
    }

    pub fn nftrace(&self) -> Option<&NfTrace> {
        self.nftrace.as_ref()
    }

    /// nftrace stopped (over the CPU budget) or on again; where the kernel
    /// refused, with its errno. Nothing when nftrace is off.
    pub fn nftrace_pause(&mut self, paused: bool) -> Vec<(String, i32)> {
        self.nftrace
            .as_mut()
            .map(|t| t.pause(paused))
            .unwrap_or_default()
    }

    /// Read the trace events waiting (every drain: the kernel drops what
    /// does not fit in the socket).
    pub fn poll_nftrace(&mut self) {
        if let Some(t) = &mut self.nftrace {
            t.poll();
        }
    }

    /// Trace an endpoint the target was translated to as well.
    pub fn nftrace_also(&mut self, to: crate::node::nftrace::Followed) {
        if let Some(t) = &mut self.nftrace {
            t.follow_also(to);
        }
    }

    /// A fact of device `dev` of namespace `netns`, read by `read` (given
    /// the namespace's path) the first time it is asked for since the
    /// last [`LiveEnv::expire`], then from `cache`.
    fn per_device<T: Clone + Default>(
        &self,
        cache: &RefCell<HashMap<(u32, String), T>>,
        netns: u32,
        dev: &str,
        read: impl FnOnce(&std::path::Path) -> T,
    ) -> T {
        memo(cache, (netns, dev.to_string()), || {
            self.paths.get(&netns).map(|p| read(p)).unwrap_or_default()
        })
    }

    /// Read a namespace's addresses and IPVS table again, and its
    /// Services when due. What was read on demand (links, sockets,
    /// netfilter, conntrack, routing) stays until read again: a tick of
    /// another flow must not empty what a verdict, and the recording's
    /// facts, already used (CI run 9: incident 1's replay check).
    fn refresh(&mut self, ino: u32, path: Option<&std::path::Path>) {
        let (addrs, ipvs) = match path {
            Some(p) => (
                addresses_in(p).unwrap_or_default(),
                crate::node::ipvs::table_in(p),
            ),
            None => (Vec::new(), Vec::new()),
        };
        let gotos = self
            .nftrace
            .as_ref()
            .map(|t| t.gotos(ino))
            .unwrap_or_default();
        let f = self.cache.entry(ino).or_insert_with(|| NetnsFacts {
            at: Instant::now(),
            addrs: Vec::new(),
            ipvs: Vec::new(),
            nf: None,
            links: None,
            bound: Vec::new(),
            traced: Vec::new(),
            gotos: Vec::new(),
            conntrack: None,
            listen: None,
            routing: None,
            services: None,
            read_to: 0,
            nf_read_to: 0,
        });
        f.at = Instant::now();
        f.addrs = addrs;
        f.ipvs = ipvs;
        f.gotos = gotos;
        f.services = match (f.services.take(), path) {
            (Some((at, s)), _) if at.elapsed() < SERVICES_REFRESH => Some((at, s)),
            (_, Some(p)) => Some((Instant::now(), services_in(p))),
            (_, None) => None,
        };
    }

    /// Force a re-read (for the final report).
    pub fn expire(&mut self) {
        self.cache.clear();
        self.tc.borrow_mut().clear();
        self.dev_programs.borrow_mut().clear();
        self.cgroups.borrow_mut().clear();
        self.cgroup_skb.borrow_mut().take();
        self.qdiscs.borrow_mut().clear();
        self.xfrm.borrow_mut().clear();
        self.frag_time.borrow_mut().clear();
        self.devmaps.borrow_mut().clear();
    }

    /// What was read since the last [`LiveEnv::expire`], as a fixed
    /// inventory: after the final report, what a recording replays the
    /// report against.
    pub fn snapshot(&self) -> Inventory {
        Inventory {
            by_netns: self
                .cache
                .iter()
                .filter(|(_, f)| !f.addrs.is_empty())
                .map(|(ino, f)| (*ino, f.addrs.clone()))
                .collect(),
            nf: self
                .cache
                .iter()
                .filter_map(|(ino, f)| Some((*ino, f.nf.as_ref()?.1.clone())))
                .filter(|(_, v)| !v.is_empty())
                .collect(),
            tc: self
                .tc
                .borrow()
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            dev_programs: self
                .dev_programs
                .borrow()
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            cgroups: self
                .cgroups
                .borrow()
                .iter()
                .filter_map(|(k, v)| Some((*k, v.clone()?)))
                .collect(),
            cgroup_skb: self.cgroup_skb.borrow().clone(),
            qdiscs: self
                .qdiscs
                .borrow()
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            xfrm: self
                .xfrm
                .borrow()
                .iter()
                .filter_map(|(k, v)| Some((*k, v.clone()?)))
                .collect(),
            frag_time: self
                .frag_time
                .borrow()
                .iter()
                .filter_map(|(k, v)| Some((*k, (*v)?)))
                .collect(),
            devmaps: self
                .devmaps
                .borrow()
                .iter()
                .filter_map(|(k, v)| Some((*k, (*v)?)))
                .collect(),
            // Rebuilt from the owner watch (ReplayEnv), not kept.
            facts: Default::default(),
            ipvs: self
                .cache
                .iter()
                .filter(|(_, f)| !f.ipvs.is_empty())
                .map(|(ino, f)| (*ino, f.ipvs.clone()))
                .collect(),
            links: self
                .cache
                .iter()
                .filter_map(|(ino, f)| Some((*ino, f.links.clone()?)))
                .filter(|(_, v)| !v.is_empty())
                .collect(),
            bound: self
                .cache
                .iter()
                .filter(|(_, f)| !f.bound.is_empty())
                .map(|(ino, f)| (*ino, f.bound.clone()))
                .collect(),
            nftrace: self
                .cache
                .iter()
                .filter(|(_, f)| !f.traced.is_empty())
                .map(|(ino, f)| (*ino, f.traced.clone()))
                .collect(),
            nf_gotos: self
                .cache
                .iter()
                .filter(|(_, f)| !f.gotos.is_empty())
                .map(|(ino, f)| (*ino, f.gotos.clone()))
                .collect(),
            conntrack: self
                .cache
                .iter()
                .filter_map(|(ino, f)| Some((*ino, f.conntrack?)))
                .collect(),
            listen: self
                .cache
                .iter()
                .filter_map(|(ino, f)| Some((*ino, f.listen?)))
                .collect(),
            routing: self
                .cache
                .iter()
                .filter_map(|(ino, f)| Some((*ino, f.routing.clone()?)))
                .collect(),
            services: self
                .cache
                .iter()
                .filter_map(|(ino, f)| Some((*ino, f.services.as_ref()?.1.clone())))
                .filter(|(_, v)| !v.is_empty())
                .collect(),
        }
    }
}

impl LiveEnv {
    /// The links of the namespaces at the other end of the veths packets
    /// were dropped on (a pod's eth0 whose host-side end is a bridge port
    /// in the node's namespace), which no hop of the flow may have been
    /// seen in: the causes that read a drop's device read its other end
    /// too (bridge.rs, sysctl.rs, veth.rs).
    fn read_peers(&mut self, names: &mut Names, flow: &Flow, drops_in: &[u32]) {
        let peers: Vec<u32> = flow
            .hops
            .iter()
            .filter(|h| drops_in.contains(&h.netns_inode))
            .filter_map(|h| {
                let links = self.cache.get(&h.netns_inode)?.links.as_ref()?;
                let dev = links.iter().find(|l| l.dev == *h.dev)?;
                dev.peer.as_ref()?.netns
            })
            .collect();
        for y in peers {
            let fresh = self
                .cache
                .get(&y)
                .is_some_and(|f| f.links.is_some() && f.at.elapsed() < Duration::from_millis(500));
            if fresh {
                continue;
            }
            let Some(p) = names.netns.path(y) else {
                continue;
            };
            self.paths.insert(y, p.clone());
            self.refresh(y, Some(&p));
            let links = self.links_with_peers(y, &p, names);
            if let Some(f) = self.cache.get_mut(&y) {
                f.links = Some(links);
            }
        }
    }

    /// The links of namespace `ino` (at `path`), each veth's other end
    /// with the namespace it is in: the ids that namespace gives the
    /// others, asked (node::link::nsids_in, against every namespace known)
    /// only when one of its veths names an id not asked before.
    fn links_with_peers(
        &mut self,
        ino: u32,
        path: &std::path::Path,
        names: &mut Names,
    ) -> Vec<LinkConf> {
        let mut links = links_in(Some(path));
        let ids: Vec<i32> = links
            .iter()
            .filter_map(|l| l.peer.as_ref()?.netnsid)
            .collect();
        let (known, at) = self
            .nsids
            .entry(ino)
            .or_insert_with(|| (HashMap::new(), Instant::now()));
        let ask = ids.iter().any(|id| match known.get(id) {
            None => true,
            Some(0) => at.elapsed() >= NSIDS_RETRY,
            Some(_) => false,
        });
        if ask {
            *known = nsids_in(path, &names.netns.known_paths());
            for id in &ids {
                known.entry(*id).or_insert(0);
            }
            *at = Instant::now();
        }
        for p in links.iter_mut().filter_map(|l| l.peer.as_mut()) {
            if let Some(&y) = p.netnsid.and_then(|id| known.get(&id)).filter(|y| **y != 0) {
                p.netns = Some(y);
                p.netns_name = Some(names.netns.name(y).to_string());
            }
        }
        links
    }
}

/// Whether this flow needs route lookups in `ino` that the cache (read
/// for another flow, or before this flow's drop) lacks: which routing is
/// read depends on the flow, not only on the time.
fn routing_missing(
    cached: Option<&NetnsFacts>,
    ino: u32,
    no_route_in: &[u32],
    route_queries: &[(u32, RouteQuery)],
) -> bool {
    let mine = |q: &&(u32, RouteQuery)| q.0 == ino;
    (no_route_in.contains(&ino) || route_queries.iter().any(|q| mine(&q)))
        && cached.is_some_and(|f| {
            f.routing.as_ref().is_none_or(|r| {
                route_queries
                    .iter()
                    .filter(mine)
                    .any(|(_, q)| !r.lookups.iter().any(|l| l.query == *q))
            })
        })
}

/// How long an id no known namespace had waits before it is asked again.
const NSIDS_RETRY: Duration = Duration::from_secs(5);

/// The routing of namespace `ino` (at `path`), where a followed packet
/// found no route there or a drop there calls for a route lookup
/// (`queries`: rules::route_query), with those lookups.
fn routing_facts(
    path: &std::path::Path,
    ino: u32,
    no_route_in: &[u32],
    queries: &[(u32, RouteQuery)],
) -> Option<Routing> {
    let mine: Vec<&RouteQuery> = queries
        .iter()
        .filter(|(n, _)| *n == ino)
        .map(|(_, q)| q)
        .collect();
    if !no_route_in.contains(&ino) && mine.is_empty() {
        return None;
    }
    let mut routing = routing_in(Some(path));
    routing.lookups = mine.into_iter().map(|q| lookup_in(path, q)).collect();
    Some(routing)
}

impl PreparedEnv for LiveEnv {
    /// Read what the flow's verdict may look up: every hop's namespace,
    /// with its netfilter counters where a followed packet was dropped by
    /// netfilter.
    fn prepare(&mut self, names: &mut Names, flow: &Flow) {
        // Where a followed packet was dropped, or a SYN was taken by a
        // listener that never answered (a full accept queue drops it
        // without a drop reason).
        let mut drops_in: Vec<u32> = flow
            .hops
            .iter()
            .filter(|h| {
                matches!(h.data, HopData::Drop(_))
                    || flow.replies == 0 && crate::verdict::rules::syn_consumed(h)
            })
            .map(|h| h.netns_inode)
            .collect();
        // A TCP request nothing came back for: where it was last seen
        // (a listener's full queue drops SYNs with no sign where tc is
        // the device hook).
        if flow.replies == 0
            && flow.key.proto == 6
            && let Some(last) = crate::verdict::rules::last_request_netns(flow)
        {
            drops_in.push(last);
        }
        // The namespaces whose links a cause reads beyond the drop's (the
        // sender's tunnel device for a frame the far side refused).
        drops_in.extend(crate::verdict::tunnel::links_wanted(flow));
        // The translating namespace of a reply conntrack left untranslated.
        let ct_wanted = crate::verdict::ct_state::conntrack_wanted(flow);
        let no_route_in: Vec<u32> = flow
            .hops
            .iter()
            .filter(|h| {
                matches!(&h.data, HopData::Drop(d)
                    if matches!(d.reason, DropReason::IpInnoroutes | DropReason::IpOutnoroutes))
            })
            .map(|h| h.netns_inode)
            .collect();
        // Drops the routing of the packet's destination may explain: the
        // route as the kernel looks it up there, read with the rules.
        // One lookup per namespace and query: every retransmission of a
        // dropped request asks the same.
        let mut route_queries: Vec<(u32, RouteQuery)> = Vec::new();
        for q in flow
            .hops
            .iter()
            .filter_map(|h| Some((h.netns_inode, crate::verdict::rules::route_query(flow, h)?)))
        {
            if !route_queries.contains(&q) {
                route_queries.push(q);
            }
        }
        // The newest hop of this flow in each of its namespaces: what was
        // read there is read again (at most every 500 ms, netfilter's
        // every NF_REFRESH) only when the flow has a hop there newer than
        // the read, so an idle flow costs no reads (the final report
        // reads everything afresh: expire()).
        let mut newest: HashMap<u32, u64> = HashMap::new();
        for h in &flow.hops {
            let n = newest.entry(h.netns_inode).or_default();
            *n = (*n).max(h.ts_ns);
        }
        for h in &flow.hops {
            let ino = h.netns_inode;
            if ino == 0 {
                continue;
            }
            let last = newest.get(&ino).copied().unwrap_or_default();
            let want_nf =
                matches!(&h.data, HopData::Drop(d) if d.reason == DropReason::NetfilterDrop);
            let cached = self.cache.get(&ino);
            let stale = cached
                .is_none_or(|f| f.at.elapsed() >= Duration::from_millis(500) && last > f.read_to);
            let nf_due = want_nf
                && cached.is_none_or(|f| {
                    f.nf.as_ref()
                        .is_none_or(|(t, _)| t.elapsed() >= NF_REFRESH && last > f.nf_read_to)
                });
            // Every hop of every idle flow comes here each tick: the path
            // (a scan of /run/netns for an unknown inode) only when
            // something is to be read.
            let links_due = drops_in.contains(&ino)
                && (stale
                    || routing_missing(cached, ino, &no_route_in, &route_queries)
                    || cached.is_none_or(|f| f.links.is_none()));
            let ct_due = ct_wanted == Some(ino) && cached.is_none_or(|f| f.conntrack.is_none());
            if !stale && !nf_due && !links_due && !ct_due {
                continue;
            }
            let path = names.netns.path(ino);
            if let Some(p) = &path {
                self.paths.insert(ino, p.clone());
            }
            if stale {
                self.refresh(ino, path.as_deref());
                if let Some(f) = self.cache.get_mut(&ino) {
                    f.read_to = f.read_to.max(last);
                }
            }
            if links_due
                && let Some(p) = &path
                && self.cache.contains_key(&ino)
            {
                let links = self.links_with_peers(ino, p, names);
                let Some(facts) = self.cache.get_mut(&ino) else {
                    continue;
                };
                facts.links = Some(links);
                facts.bound = bound_in(p);
                facts.listen = listen_stats_in(p);
                // Another flow's read, which needs no routing, leaves the
                // routing read for this namespace's earlier drops.
                let routing = routing_facts(p, ino, &no_route_in, &route_queries);
                facts.routing = routing.or(facts.routing.take());
            }
            if ct_due
                && !nf_due
                && let Some(p) = &path
                && let Some(facts) = self.cache.get_mut(&ino)
            {
                facts.conntrack = conntrack_in(p);
            }
            if nf_due
                && let Some(p) = &path
                && let Some(facts) = self.cache.get_mut(&ino)
            {
                let (now, _) = netfilter::snapshot(p, None);
                let moved = netfilter::moved(self.nf_baseline.get(&ino).map(Vec::as_slice), &now);
                facts.nf = Some((Instant::now(), moved));
                facts.nf_read_to = facts.nf_read_to.max(last);
                if let Some(t) = &mut self.nftrace {
                    t.poll();
                    facts.traced = t.resolved(ino);
                }
                facts.conntrack = conntrack_in(p);
            }
        }
        self.read_peers(names, flow, &drops_in);
    }

    fn env(&self) -> &dyn Env {
        self
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

    fn ipvs(&self, netns: u32) -> &[VirtualService] {
        self.cache
            .get(&netns)
            .map(|f| f.ipvs.as_slice())
            .unwrap_or(&[])
    }

    fn links(&self, netns: u32) -> &[LinkConf] {
        self.cache
            .get(&netns)
            .and_then(|f| f.links.as_deref())
            .unwrap_or(&[])
    }

    fn bound(&self, netns: u32) -> &[Bound] {
        self.cache
            .get(&netns)
            .map(|f| f.bound.as_slice())
            .unwrap_or(&[])
    }

    fn nf_traced(&self, netns: u32) -> &[NfTraced] {
        self.cache
            .get(&netns)
            .map(|f| f.traced.as_slice())
            .unwrap_or(&[])
    }

    fn nf_gotos(&self, netns: u32) -> &[TracedGoto] {
        self.cache
            .get(&netns)
            .map(|f| f.gotos.as_slice())
            .unwrap_or(&[])
    }

    fn conntrack(&self, netns: u32) -> Option<&ConntrackTable> {
        self.cache.get(&netns).and_then(|f| f.conntrack.as_ref())
    }

    fn listen_stats(&self, netns: u32) -> Option<ListenStats> {
        self.cache.get(&netns).and_then(|f| f.listen)
    }

    fn routing(&self, netns: u32) -> Option<&Routing> {
        self.cache.get(&netns).and_then(|f| f.routing.as_ref())
    }

    fn services(&self, netns: u32) -> &[ServiceAddr] {
        self.cache
            .get(&netns)
            .and_then(|f| f.services.as_ref())
            .map(|(_, s)| s.as_slice())
            .unwrap_or(&[])
    }

    fn dst_facts(&self, dst: IpAddr) -> Vec<Evidence> {
        crate::verdict::node_facts::owner_facts(&self.vip, dst)
    }

    fn qdiscs(&self, netns: u32, dev: &str, ifindex: u32) -> Vec<Qdisc> {
        self.per_device(&self.qdiscs, netns, dev, |p| {
            crate::node::qdisc::qdiscs_in(Some(p), ifindex)
        })
    }

    fn xfrm(&self, netns: u32) -> Option<Xfrm> {
        memo(&self.xfrm, netns, || {
            self.paths
                .get(&netns)
                .and_then(|p| crate::node::xfrm::xfrm_in(Some(p)))
        })
    }

    fn frag_time(&self, netns: u32) -> Option<u32> {
        memo(&self.frag_time, netns, || {
            self.paths
                .get(&netns)
                .and_then(|p| crate::node::link::sysctl_in(p, "net/ipv4/ipfrag_time"))
                .and_then(|s| s.trim().parse().ok())
        })
    }

    fn devmap_target(&self, map_id: u32, key: u32) -> Option<u32> {
        memo(&self.devmaps, (map_id, key), || {
            crate::node::devmap::target(map_id, key)
        })
    }

    fn cgroup_skb(&self, ids: &[u64]) -> CgroupSkb {
        if let Some(c) = self.cgroup_skb.borrow().as_ref()
            && ids.iter().all(|i| c.asked.contains(i))
        {
            return c.clone();
        }
        // Ask for the ids read before too: the recording keeps one.
        let mut all: Vec<u64> = ids.to_vec();
        if let Some(c) = self.cgroup_skb.borrow().as_ref() {
            all.extend(&c.asked);
        }
        all.sort_unstable();
        all.dedup();
        let c = crate::node::bpf_progs::cgroup_skb(&all);
        *self.cgroup_skb.borrow_mut() = Some(c.clone());
        c
    }

    fn cgroup_programs(&self, id: u64) -> Option<CgroupPrograms> {
        if let Some(v) = self.cgroups.borrow().get(&id) {
            return v.clone();
        }
        let v = crate::node::bpf_progs::cgroup_sock_programs(id);
        self.cgroups.borrow_mut().insert(id, v.clone());
        v
    }

    fn dev_programs(&self, netns: u32, dev: &str) -> Vec<AttachedProgram> {
        self.per_device(&self.dev_programs, netns, dev, |p| {
            crate::node::bpf_progs::dev_programs_in(p, dev)
        })
    }

    fn tc_filters(&self, netns: u32, dev: &str) -> Vec<String> {
        self.per_device(&self.tc, netns, dev, |p| {
            crate::node::tc::ingress_filters(p, dev)
        })
    }
}

/// What `cache` holds for `key`, read once (`read`, kept whatever it
/// gave, None included) until the cache is emptied.
fn memo<K: Eq + std::hash::Hash, V: Clone>(
    cache: &RefCell<HashMap<K, V>>,
    key: K,
    read: impl FnOnce() -> V,
) -> V {
    if let Some(v) = cache.borrow().get(&key) {
        return v.clone();
    }
    let v = read();
    cache.borrow_mut().insert(key, v.clone());
    v
}

/// Namespaces whose addresses are watched for the target: the traced ones,
/// or by default tracer's own and every named one.
pub fn watched_netns(netns: &[NetnsRef]) -> Vec<(String, PathBuf)> {
    if !netns.is_empty() {
        return netns
            .iter()
            .map(|n| (n.label.clone(), n.path.clone()))
            .collect();
    }
    let mut v = vec![("host".to_string(), PathBuf::from("/proc/self/ns/net"))];
    v.extend(crate::node::netns::named());
    v
}

/// Netfilter counters of every namespace we can name, before tracing;
/// and, from the same reading, the endpoints kube-proxy's rules there
/// send the followed address to ([`netfilter::snapshot`]).
pub fn nf_baseline(
    extra: Vec<PathBuf>,
    followed: &crate::node::nftrace::Followed,
) -> (HashMap<u32, Vec<NfRule>>, crate::node::services::Endpoints) {
    let mut paths = extra;
    paths.push("/proc/self/ns/net".into());
    paths.extend(crate::node::netns::named().into_iter().map(|(_, p)| p));
    let mut out = HashMap::new();
    let mut endpoints = Vec::new();
    for p in paths {
        // A traced namespace is also named: read once.
        if let Some(ino) = crate::node::netns::netns_inode(&p)
            && !out.contains_key(&ino)
        {
            let (rules, eps) = netfilter::snapshot(&p, Some(followed));
            out.insert(ino, rules);
            endpoints.extend(eps);
        }
    }
    (out, endpoints)
}
