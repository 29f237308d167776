//! Turning kernel numbers into names: drop reasons and reset reasons (from
//! BTF), code addresses (from /proc/kallsyms), namespaces (from /run/netns
//! and /proc/*/ns/net) and the pods that own them (node/pods.rs).

use std::{
    cell::RefCell,
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::model::{
    drop_reason::DropReason,
    intern::{Interner, Name},
};

#[derive(Debug, Default)]
pub struct Kallsyms {
    /// Sorted by address: each text symbol's address and the offset of its
    /// name in `names`. One buffer, not a String per symbol: ~120k symbols
    /// took ~7.8 MB as (u64, String), 16 bytes each plus the names here.
    syms: Vec<(u64, u32)>,
    /// The names, each ended by a newline.
    names: String,
    /// Addresses named so far, when a recording wants them (see
    /// [`Kallsyms::record`]).
    log: RefCell<Option<BTreeMap<u64, String>>>,
    /// A recording's names by address, instead of the table.
    fixed: Option<HashMap<u64, String>>,
}

impl Kallsyms {
    pub fn parse(text: &str) -> Kallsyms {
        Kallsyms::read(text.as_bytes())
    }

    /// The running kernel's table, read a line at a time: the whole text
    /// (5.4 MB on 6.18, in a buffer grown to 8 MiB) was on the start-up
    /// peak of memory, beside the BTF parse. Empty when unreadable.
    pub fn read_proc() -> Kallsyms {
        std::fs::File::open("/proc/kallsyms")
            .map(|f| Kallsyms::read(std::io::BufReader::with_capacity(64 * 1024, f)))
            .unwrap_or_default()
    }

    /// Parse kallsyms lines ("ADDR TYPE NAME [MODULE]"), keeping text
    /// symbols.
    pub fn read(mut r: impl std::io::BufRead) -> Kallsyms {
        let mut names = String::new();
        let mut syms: Vec<(u64, u32)> = Vec::new();
        let mut line = String::new();
        while r.read_line(&mut line).is_ok_and(|n| n > 0) {
            let mut it = line.split_whitespace();
            let parsed = (|| {
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let ty = it.next()?;
                let name = it.next()?;
                // text symbols only
                if addr == 0 || !matches!(ty, "t" | "T") {
                    return None;
                }
                Some((addr, name))
            })();
            if let Some((addr, name)) = parsed
                && let Ok(off) = u32::try_from(names.len())
            {
                names.push_str(name);
                names.push('\n');
                syms.push((addr, off));
            }
            line.clear();
        }
        // Aliases (one address, several names): symbolize() names the last
        // listed (stable sort, then the last symbol at or below).
        syms.sort_by_key(|(a, _)| *a);
        syms.shrink_to_fit();
        names.shrink_to_fit();
        Kallsyms {
            syms,
            names,
            ..Default::default()
        }
    }

    /// Every text symbol's name, in address order.
    pub fn text_names(&self) -> impl Iterator<Item = &str> {
        self.names.split_terminator('\n')
    }

    /// Keep every address named from now on, for [`Kallsyms::recorded`].
    pub fn record(&self) {
        self.log.borrow_mut().get_or_insert_with(BTreeMap::new);
    }

    /// The addresses named since [`Kallsyms::record`], with their names.
    pub fn recorded(&self) -> BTreeMap<u64, String> {
        self.log.borrow().clone().unwrap_or_default()
    }

    /// Names from a recording: each address as the recorded run named it.
    pub fn fixed(names: HashMap<u64, String>) -> Kallsyms {
        Kallsyms {
            fixed: Some(names),
            ..Default::default()
        }
    }

    fn name(&self, off: u32) -> &str {
        let rest = &self.names[off as usize..];
        &rest[..rest.find('\n').unwrap_or(rest.len())]
    }

    /// `function+0xoff`, or the hex address when unknown (e.g. kptr_restrict).
    pub fn symbolize(&self, addr: u64) -> String {
        if addr == 0 {
            return String::new();
        }
        if let Some(fixed) = &self.fixed {
            return fixed
                .get(&addr)
                .cloned()
                .unwrap_or_else(|| format!("{addr:#x}"));
        }
        let s = match self.syms.partition_point(|(a, _)| *a <= addr) {
            0 => format!("{addr:#x}"),
            i => {
                let (a, off) = self.syms[i - 1];
                format!("{}+{:#x}", self.name(off), addr - a)
            }
        };
        if let Some(log) = self.log.borrow_mut().as_mut() {
            log.insert(addr, s.clone());
        }
        s
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty() && self.fixed.is_none()
    }
}

/// Just the function part of `function+0xoff`.
pub fn func_of(loc: &str) -> &str {
    loc.split('+').next().unwrap_or(loc)
}

/// A function's name without the suffix of a specialised copy
/// (`ip_rcv_finish_core.constprop.0`, `.isra.0`, `.part.0`, `.cold`):
/// the same function.
pub fn stem(func: &str) -> &str {
    func.split('.').next().unwrap_or(func)
}

/// Network namespace inode -> human name.
#[derive(Debug)]
pub struct NetnsNames {
    names: HashMap<u32, Name>,
    /// "inode:N" for namespaces no scan could name (one shared name each,
    /// not one string per hop).
    unnamed: HashMap<u32, Name>,
    paths: HashMap<u32, PathBuf>,
    /// The pod owning a namespace (`namespace/name`), where the node says
    /// (node/pods.rs).
    pods: PodNames,
    /// Namespaces whose pod was looked for (once each, when first seen).
    pods_tried: HashSet<u32>,
    last_scan: Option<Instant>,
    /// Names from a recording: never scan the node.
    fixed: bool,
}

/// Network namespace inode -> the pod that owns it (`namespace/name`),
/// for the namespaces whose pod is known: what output shows for a hop
/// beside (text: instead of) its namespace's name.
#[derive(Debug, Clone, Default)]
pub struct PodNames(HashMap<u32, Name>);

impl PodNames {
    pub fn get(&self, ino: u32) -> Option<&str> {
        self.0.get(&ino).map(Name::as_str)
    }

    /// How many namespaces have their pod named (it only grows).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// By inode, as a recording keeps them.
    pub fn to_map(&self) -> BTreeMap<u32, String> {
        self.0.iter().map(|(i, n)| (*i, n.to_string())).collect()
    }
}

impl FromIterator<(u32, String)> for PodNames {
    fn from_iter<I: IntoIterator<Item = (u32, String)>>(it: I) -> Self {
        PodNames(it.into_iter().map(|(i, n)| (i, n.into())).collect())
    }
}

impl Default for NetnsNames {
    fn default() -> Self {
        let mut n = NetnsNames {
            names: HashMap::new(),
            unnamed: HashMap::new(),
            paths: HashMap::new(),
            pods: PodNames::default(),
            pods_tried: HashSet::new(),
            last_scan: None,
            fixed: false,
        };
        n.scan();
        n
    }
}

impl NetnsNames {
    /// Names and pods from a recording, by inode; nothing is read from
    /// the node.
    pub fn fixed(names: BTreeMap<u32, String>, pods: BTreeMap<u32, String>) -> NetnsNames {
        NetnsNames {
            names: names
                .into_iter()
                .map(|(i, n)| (i, n.as_str().into()))
                .collect(),
            unnamed: HashMap::new(),
            paths: HashMap::new(),
            pods: pods.into_iter().collect(),
            pods_tried: HashSet::new(),
            last_scan: None,
            fixed: true,
        }
    }

    /// The pods known to own namespaces (what a recording keeps, and
    /// what output shows).
    pub fn pods(&self) -> &PodNames {
        &self.pods
    }

    /// Every namespace named so far (what a recording keeps).
    pub fn known(&self) -> BTreeMap<u32, String> {
        self.names
            .iter()
            .map(|(i, n)| (*i, n.to_string()))
            .collect()
    }

    pub fn scan(&mut self) {
        if self.fixed {
            return;
        }
        self.last_scan = Some(Instant::now());
        // The namespace tracer runs in, and PID 1's, are "host".
        let mut host = Vec::new();
        for p in ["/proc/self/ns/net", "/proc/1/ns/net"] {
            if let Some(ino) = crate::node::netns::netns_inode(Path::new(p)) {
                host.push(ino);
                self.names.entry(ino).or_insert_with(|| "host".into());
                self.paths.entry(ino).or_insert_with(|| p.into());
            }
        }
        for (name, path) in crate::node::netns::named() {
            if let Some(ino) = crate::node::netns::netns_inode(&path) {
                self.names.insert(ino, name.as_str().into());
                self.paths.insert(ino, path);
            }
        }
        for (pid, dir) in crate::node::procstat::pids(Path::new("/proc")) {
            let p = dir.join("ns/net");
            if let Some(ino) = crate::node::netns::netns_inode(&p) {
                self.paths.entry(ino).or_insert_with(|| p.clone());
                self.names.entry(ino).or_insert_with(|| {
                    let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
                    format!("pid:{pid}({})", comm.trim()).into()
                });
            }
        }
        self.scan_pods(&host);
    }

    /// Look for the pods of the namespaces seen for the first time (not
    /// the host's: hostNetwork pods share it), once each: a pod's
    /// sandbox is in its cgroup, and kubelet made its log directory,
    /// before its namespace has an interface.
    fn scan_pods(&mut self, host: &[u32]) {
        let fresh: BTreeSet<u32> = self
            .names
            .keys()
            .copied()
            .filter(|i| *i != 0 && !host.contains(i) && !self.pods_tried.contains(i))
            .collect();
        if fresh.is_empty() {
            return;
        }
        self.pods_tried.extend(&fresh);
        let root = crate::node::hostroot::get().join("/");
        for (ino, pod) in crate::node::pods::pods_of_netns(&root, &fresh) {
            self.pods.0.insert(ino, pod.into());
        }
    }

    pub fn name(&mut self, ino: u32) -> Name {
        if ino == 0 {
            return self
                .names
                .entry(0)
                .or_insert_with(|| "unknown".into())
                .clone();
        }
        if !self.names.contains_key(&ino)
            && self
                .last_scan
                .is_none_or(|t| t.elapsed() > Duration::from_millis(200))
        {
            self.scan();
        }
        if let Some(n) = self.names.get(&ino) {
            return n.clone();
        }
        self.unnamed
            .entry(ino)
            .or_insert_with(|| format!("inode:{ino}").into())
            .clone()
    }

    /// Every namespace a path is known for, as (inode, path), after a
    /// fresh scan (at most one per 200 ms, as [`NetnsNames::name`]).
    pub fn known_paths(&mut self) -> Vec<(u32, PathBuf)> {
        if self
            .last_scan
            .is_none_or(|t| t.elapsed() > Duration::from_millis(200))
        {
            self.scan();
        }
        self.paths.iter().map(|(i, p)| (*i, p.clone())).collect()
    }

    /// A path that opens this namespace, when one is known.
    pub fn path(&mut self, ino: u32) -> Option<PathBuf> {
        if !self.paths.contains_key(&ino) {
            self.scan();
        }
        self.paths.get(&ino).cloned()
    }
}

/// All name tables a run needs.
#[derive(Debug, Default)]
pub struct Names {
    pub drop_reasons: HashMap<u32, String>,
    /// This kernel's skb:kfree_skb has no reason (before 5.17): drop
    /// reasons are inferred from the location (model/inferred.rs).
    pub no_drop_reason: bool,
    /// The icmp_send hook is not attached (inference then does not take
    /// "no ICMP sent" for a fact).
    pub icmp_unhooked: bool,
    pub rst_reasons: HashMap<u32, String>,
    pub kallsyms: Kallsyms,
    pub netns: NetnsNames,
    /// Device names, reasons and code locations shared by all hops.
    pub interned: Interner,
}

impl Names {
    /// The running kernel's reason numbered `v`; one it does not name is
    /// `reason_V`.
    pub fn drop_reason(&mut self, v: u32) -> DropReason {
        let name = match self.drop_reasons.get(&v) {
            Some(r) => DropReason::named(r),
            None => DropReason::named(&format!("reason_{v}")),
        };
        match name {
            DropReason::Other(n) => DropReason::Other(self.interned.get(&n)),
            known => known,
        }
    }

    pub fn rst_reason(&mut self, v: u32) -> Option<Name> {
        if v == u32::MAX {
            return None;
        }
        Some(match self.rst_reasons.get(&v) {
            Some(r) => self.interned.get(r),
            None => self.interned.get(&format!("reason_{v}")),
        })
    }

    /// A device (or other NUL-padded kernel) name, shared.
    pub fn dev(&mut self, b: &[u8]) -> Name {
        self.interned.get(crate::model::event::cname_str(b))
    }

    /// `function+0xoff` of a code address, shared.
    pub fn location(&mut self, addr: u64) -> Name {
        let s = self.kallsyms.symbolize(addr);
        self.interned.get(&s)
    }

    /// Any other short, repeated string.
    pub fn intern(&mut self, s: &str) -> Name {
        self.interned.get(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolizes() {
        let k = Kallsyms::parse(
            "ffffffff81000000 T _stext\nffffffff81100000 t nf_hook_slow\nffffffff81100400 T ip_rcv\nffffffff81200000 d some_data\n",
        );
        assert_eq!(k.symbolize(0xffffffff81100010), "nf_hook_slow+0x10");
        assert_eq!(k.symbolize(0xffffffff81100400), "ip_rcv+0x0");
        assert_eq!(k.symbolize(0x1000), "0x1000");
        assert_eq!(k.symbolize(0), "");
        assert_eq!(func_of("nf_hook_slow+0x10"), "nf_hook_slow");
        let k = Kallsyms::parse(
            "ffffffff81000200 T zeta\nffffffff81000100 t alpha\nffffffff81000200 T beta\n",
        );
        assert_eq!(k.symbolize(0xffffffff81000208), "beta+0x8");
        assert_eq!(k.symbolize(0xffffffff810001ff), "alpha+0xff");
    }

    /// A recording's pods come back by inode; a namespace without one has
    /// none.
    #[test]
    fn recorded_pods() {
        let n = NetnsNames::fixed(
            BTreeMap::from([(7, "cni-1234".to_string()), (8, "host".to_string())]),
            BTreeMap::from([(7, "default/web-0".to_string())]),
        );
        assert_eq!(n.pods().get(7), Some("default/web-0"));
        assert_eq!(n.pods().get(8), None);
        assert_eq!(
            n.pods().to_map(),
            BTreeMap::from([(7, "default/web-0".into())])
        );
    }

    #[test]
    fn reasons() {
        let mut n = Names::default();
        n.drop_reasons.insert(3, "NO_SOCKET".into());
        assert_eq!(n.drop_reason(3), DropReason::NoSocket);
        assert_eq!(n.drop_reason(77).as_str(), "reason_77");
        assert_eq!(n.rst_reason(u32::MAX), None);
        assert_eq!(n.rst_reason(5).as_deref(), Some("reason_5"));
    }
}
