//! The kernel's BTF (`/sys/kernel/btf/vmlinux`, and each module's split
//! BTF on top of it), read with the btf-rs crate: struct member offsets
//! through anonymous members, enum value names, function and tracepoint
//! prototypes. This module only walks the crate's types for those
//! questions.

pub mod offsets;

use std::{cell::RefCell, collections::HashMap, path::Path, rc::Rc};

use btf_rs::{Backend, Type};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum BtfError {
    #[error("cannot read BTF from {path}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("malformed BTF: {0}")]
    Malformed(String),
    #[error("BTF has no {0}")]
    Missing(String),
}

/// Where the kernel publishes its BTF (and where aya looks by itself).
pub const SYS: &str = "/sys/kernel/btf/vmlinux";

/// The kernel's BTF, `/sys/kernel/btf/vmlinux`, unless `TRACER_BTF` names
/// another file (tests use it to check the no-BTF path; module BTF is then
/// looked up beside it). In a container whose /sys is not the host's, the
/// host root's.
pub fn vmlinux_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("TRACER_BTF") {
        return p.into();
    }
    if Path::new(SYS).exists() {
        return SYS.into();
    }
    let host = crate::node::hostroot::get().join(SYS);
    if host.exists() { host } else { SYS.into() }
}

/// vmlinux's BTF and the modules' split BTF. Type ids are per file: a
/// module's continue after vmlinux's, and modules reuse each other's, so a
/// type found in one is walked in that one.
pub struct Btf {
    base: btf_rs::Btf,
    modules: Vec<btf_rs::Btf>,
    /// Ids by name, as found: a lookup in mapped BTF reads every type's
    /// name, and the offsets and the hook plan ask for the same few dozen
    /// names again and again.
    ids: RefCell<HashMap<String, Ids>>,
    /// See [`Btf::scans`].
    scans: std::cell::Cell<usize>,
}

/// The types of one name: where, and their id there.
type Ids = Rc<[(Where, u32)]>;

/// Which BTF an id belongs to.
#[derive(Clone, Copy)]
enum Where {
    Vmlinux,
    Module(usize),
}

impl std::fmt::Debug for Btf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Btf")
            .field("types", &self.len())
            .field("modules", &self.modules.len())
            .finish_non_exhaustive()
    }
}

fn malformed(e: btf_rs::Error) -> BtfError {
    BtfError::Malformed(e.to_string())
}

fn io_error(path: &Path, e: btf_rs::Error) -> BtfError {
    match e {
        btf_rs::Error::IO(source) => BtfError::Io {
            path: path.display().to_string(),
            source,
        },
        e => malformed(e),
    }
}

/// A type found by name: in which BTF, and its id there.
#[derive(Clone, Copy)]
struct Found<'a> {
    btf: &'a btf_rs::Btf,
    id: u32,
    in_vmlinux: bool,
}

impl Btf {
    /// One BTF file, without module BTF.
    pub fn from_file(path: &Path) -> Result<Btf, BtfError> {
        Ok(Btf {
            base: open_base(path)?,
            modules: Vec::new(),
            ids: RefCell::default(),
            scans: std::cell::Cell::default(),
        })
    }

    /// The running kernel's BTF: vmlinux plus every module's split BTF.
    pub fn from_sys() -> Result<Btf, BtfError> {
        Btf::with_modules(&vmlinux_path())
    }

    /// `vmlinux` plus the split BTF of every module beside it.
    fn with_modules(vmlinux: &Path) -> Result<Btf, BtfError> {
        let mut btf = Btf::from_file(vmlinux)?;
        let dir = vmlinux.parent().unwrap_or(Path::new("/sys/kernel/btf"));
        if let Ok(rd) = std::fs::read_dir(dir) {
            let mut mods: Vec<_> = rd.flatten().map(|e| e.path()).collect();
            mods.sort();
            for p in mods {
                if p == vmlinux || p.file_name().is_some_and(|n| n == "vmlinux") {
                    continue;
                }
                // A module that fails to parse is skipped: its types are
                // only needed for module hooks, reported elsewhere.
                if let Ok(m) = btf_rs::Btf::from_split_file(&p, &btf.base) {
                    btf.modules.push(m);
                }
            }
        }
        Ok(btf)
    }

    /// Standalone BTF (vmlinux) from bytes.
    pub fn parse(data: &[u8]) -> Result<Btf, BtfError> {
        Ok(Btf {
            base: btf_rs::Btf::from_bytes(data).map_err(malformed)?,
            modules: Vec::new(),
            ids: RefCell::default(),
            scans: std::cell::Cell::default(),
        })
    }

    /// Number of types, void included.
    pub fn len(&self) -> usize {
        let count = |s: &btf_rs::BtfSection| {
            let (start, end) = s.type_id_range();
            (end + 1 - start) as usize
        };
        count(self.base.base())
            + self
                .modules
                .iter()
                .filter_map(btf_rs::Btf::split)
                .map(count)
                .sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() <= 1
    }

    /// The types named `name`: vmlinux's first, then the modules' in file
    /// name order, each in id order.
    fn named(&self, name: &str) -> impl Iterator<Item = Found<'_>> + '_ {
        let ids = self.ids.borrow().get(name).cloned();
        let ids = ids.unwrap_or_else(|| {
            let ids = self.lookup(name);
            self.ids.borrow_mut().insert(name.to_string(), ids.clone());
            ids
        });
        (0..ids.len()).map(move |i| {
            let (w, id) = ids[i];
            match w {
                Where::Vmlinux => Found {
                    btf: &self.base,
                    id,
                    in_vmlinux: true,
                },
                Where::Module(m) => Found {
                    btf: &self.modules[m],
                    id,
                    in_vmlinux: false,
                },
            }
        })
    }

    fn lookup(&self, name: &str) -> Ids {
        self.scans.set(self.scans.get() + 1);
        let mut ids: Vec<(Where, u32)> = self
            .base
            .resolve_ids_by_name(name)
            .unwrap_or_default()
            .into_iter()
            .map(|id| (Where::Vmlinux, id))
            .collect();
        self.module_ids(name, &mut ids);
        ids.into()
    }

    /// The modules' types of this name (parsed into memory: a hash
    /// lookup each).
    fn module_ids(&self, name: &str, ids: &mut Vec<(Where, u32)>) {
        for (i, m) in self.modules.iter().enumerate() {
            if let Some(ms) = m.split().and_then(|s| s.resolve_ids_by_name(name).ok()) {
                ids.extend(ms.into_iter().map(|id| (Where::Module(i), id)));
            }
        }
    }

    /// Look up all of `names` in one pass over vmlinux's types (mapped
    /// BTF is searched by reading every type's name, once per name
    /// otherwise: start-up asked for about 50 names, 50 passes over
    /// ~130,000 types, a second of the start under emulation and on slow
    /// nodes' older kernels). Later lookups of these names are answered
    /// from the cache; a name not given here is still found, by a pass of
    /// its own.
    pub fn prefetch<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let mut wanted: Vec<&str> = names
            .into_iter()
            .filter(|n| !self.ids.borrow().contains_key(*n))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.is_empty() {
            return;
        }
        let alternatives: Vec<String> = wanted.iter().map(|n| regex::escape(n)).collect();
        let Ok(re) = regex::Regex::new(&format!("^(?:{})$", alternatives.join("|"))) else {
            return;
        };
        let Ok(found) = self.base.resolve_ids_by_regex(&re) else {
            return;
        };
        let mut by_name: HashMap<&str, Vec<(Where, u32)>> =
            wanted.iter().map(|n| (*n, Vec::new())).collect();
        // In id order, as resolve_ids_by_name gives them.
        for id in found {
            let name = self
                .base
                .resolve_type_by_id(id)
                .ok()
                .and_then(|t| self.base.resolve_name(t.as_btf_type()?).ok());
            if let Some(ids) = name.and_then(|n| by_name.get_mut(n.as_str())) {
                ids.push((Where::Vmlinux, id));
            }
        }
        let mut cache = self.ids.borrow_mut();
        for (name, mut ids) in by_name {
            self.module_ids(name, &mut ids);
            cache.insert(name.to_string(), ids.into());
        }
    }

    /// Passes over vmlinux's types made for a single name so far.
    pub fn scans(&self) -> usize {
        self.scans.get()
    }

    /// The first struct (or union) with this name that has members.
    fn find_struct(&self, name: &str) -> Option<(Found<'_>, Type)> {
        self.named(name)
            .find_map(|f| match f.btf.resolve_type_by_id(f.id) {
                Ok(t @ (Type::Struct(_) | Type::Union(_))) if !members(&t).is_empty() => {
                    Some((f, t))
                }
                _ => None,
            })
    }

    /// Byte offset of a dotted member path (`"nd_net.net"`, `"ns.inum"`),
    /// anonymous structs/unions included, in struct `st`. Array indexing is
    /// written `name[1]`.
    pub fn member_offset(&self, st: &str, path: &str) -> Result<u32, BtfError> {
        let missing = || BtfError::Missing(format!("{st}.{path}"));
        let (found, mut t) = self.find_struct(st).ok_or_else(missing)?;
        let btf = found.btf;
        let mut bits = 0u32;
        for part in path.split('.') {
            let (field, index) = match part.split_once('[') {
                Some((f, rest)) => (f, rest.trim_end_matches(']').parse::<u32>().ok()),
                None => (part, None),
            };
            let (off, m) = find_member(btf, &t, field).ok_or_else(missing)?;
            if m.bitfield_size().unwrap_or(0) != 0 {
                return Err(BtfError::Missing(format!("{st}.{path} (bitfield)")));
            }
            bits += off;
            t = btf
                .resolve_chained_type(&m)
                .ok()
                .and_then(|t| resolve(btf, t))
                .ok_or_else(missing)?;
            if let Some(i) = index {
                let Type::Array(a) = &t else {
                    return Err(missing());
                };
                let elem = btf.resolve_chained_type(a).map_err(|_| missing())?;
                let esz = type_size(btf, &elem).ok_or_else(missing)?;
                bits += i * esz * 8;
                t = resolve(btf, elem).ok_or_else(missing)?;
            }
        }
        if !bits.is_multiple_of(8) {
            return Err(BtfError::Missing(format!("{st}.{path} (not byte aligned)")));
        }
        Ok(bits / 8)
    }

    /// Values of an enum by name.
    pub fn enum_values(&self, name: &str) -> Option<Vec<(String, i64)>> {
        self.named(name).find_map(|f| {
            let values: Vec<(String, i64)> = match f.btf.resolve_type_by_id(f.id).ok()? {
                Type::Enum(e) => e
                    .members
                    .iter()
                    .map(|m| {
                        let v = if e.is_signed() {
                            m.val() as i32 as i64
                        } else {
                            m.val() as i64
                        };
                        (f.btf.resolve_name(m).unwrap_or_default(), v)
                    })
                    .collect(),
                Type::Enum64(e) => e
                    .members
                    .iter()
                    .map(|m| (f.btf.resolve_name(m).unwrap_or_default(), m.val() as i64))
                    .collect(),
                _ => return None,
            };
            (!values.is_empty()).then_some(values)
        })
    }

    /// Is there a type (struct, function, ...) of this name?
    pub fn has_type(&self, name: &str) -> bool {
        self.named(name).next().is_some()
    }

    /// Where function `name` is described: `Some(true)` in vmlinux's own
    /// BTF (fentry/fexit can attach to it), `Some(false)` only in a module's,
    /// None nowhere (not a traceable function on this kernel: absent, or
    /// inlined everywhere).
    pub fn func_in_vmlinux(&self, name: &str) -> Option<bool> {
        let mut found = None;
        for f in self.named(name) {
            if let Ok(Type::Func(_)) = f.btf.resolve_type_by_id(f.id) {
                if f.in_vmlinux {
                    return Some(true);
                }
                found = Some(false);
            }
        }
        found
    }

    /// How many arguments function `name` takes (its first FUNC in BTF).
    /// The fentry trampoline has a limit (see KernelCaps::fentry_max_args).
    pub fn func_arg_count(&self, name: &str) -> Option<usize> {
        self.named(name).find_map(|f| {
            let Ok(Type::Func(func)) = f.btf.resolve_type_by_id(f.id) else {
                return None;
            };
            match resolve(f.btf, f.btf.resolve_chained_type(&func).ok()?)? {
                Type::FuncProto(p) => Some(p.parameters.len()),
                _ => None,
            }
        })
    }

    /// Number of arguments of a tp_btf tracepoint (`btf_trace_<name>` is a
    /// typedef to a pointer to `void (*)(void *__data, args...)`), without
    /// the leading `__data`.
    pub fn tracepoint_arity(&self, tp: &str) -> Option<usize> {
        let f = self.named(&format!("btf_trace_{tp}")).next()?;
        let t = resolve(f.btf, f.btf.resolve_type_by_id(f.id).ok()?)?;
        let Type::Ptr(p) = t else {
            return None;
        };
        match resolve(f.btf, f.btf.resolve_chained_type(&p).ok()?)? {
            Type::FuncProto(p) => Some(p.parameters.len().saturating_sub(1)),
            _ => None,
        }
    }
}

/// vmlinux's BTF, mapped (btf-rs's `Backend::Mmap`): types are decoded
/// when asked for, nothing is parsed up front. Linux 6.16 and later map
/// their own copy of /sys/kernel/btf/vmlinux into us (pages that are not
/// the process's). Older kernels refuse to map it: it is then copied into
/// an anonymous file that is mapped instead: its ~5 MiB, where btf-rs's
/// other backend (all of it parsed into memory, the last resort here)
/// raised the start-up peak by ~15 MiB and took ~100 ms more.
fn open_base(path: &Path) -> Result<btf_rs::Btf, BtfError> {
    btf_rs::Btf::from_file_with_backend(path, Backend::Mmap)
        .or_else(|_| map_copy(path))
        .or_else(|_| btf_rs::Btf::from_file(path))
        .map_err(|e| io_error(path, e))
}

/// `path` copied into a memfd, and that mapped.
fn map_copy(path: &Path) -> Result<btf_rs::Btf, btf_rs::Error> {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let fd = memfd_create("tracer-btf", MFdFlags::MFD_CLOEXEC).map_err(std::io::Error::from)?;
    let mut copy = std::fs::File::from(fd);
    std::io::copy(&mut std::fs::File::open(path)?, &mut copy)?;
    // btf-rs maps a path; the mapping keeps the memfd alive once `copy`
    // is closed.
    use std::os::fd::AsRawFd;
    btf_rs::Btf::from_file_with_backend(
        format!("/proc/self/fd/{}", copy.as_raw_fd()),
        Backend::Mmap,
    )
}

/// Follow typedef/const/volatile/restrict/type_tag chains.
fn resolve(btf: &btf_rs::Btf, mut t: Type) -> Option<Type> {
    for _ in 0..32 {
        match t {
            Type::Typedef(_)
            | Type::Volatile(_)
            | Type::Const(_)
            | Type::Restrict(_)
            | Type::TypeTag(_) => t = btf.resolve_chained_type(t.as_btf_type()?).ok()?,
            _ => return Some(t),
        }
    }
    None
}

fn members(t: &Type) -> &[btf_rs::Member] {
    match t {
        Type::Struct(s) | Type::Union(s) => &s.members,
        _ => &[],
    }
}

fn type_size(btf: &btf_rs::Btf, t: &Type) -> Option<u32> {
    let size = match resolve(btf, t.clone())? {
        Type::Int(i) => i.size(),
        Type::Struct(s) | Type::Union(s) => s.size(),
        Type::Enum(e) => e.size(),
        Type::Enum64(e) => e.size(),
        Type::Ptr(_) => 8,
        Type::Array(a) => {
            let elem = btf.resolve_chained_type(&a).ok()?;
            return type_size(btf, &elem)?.checked_mul(a.len() as u32);
        }
        _ => return None,
    };
    Some(size as u32)
}

/// Find a member by name in struct/union `t`, descending into anonymous
/// members. Returns (bit offset, member).
fn find_member(btf: &btf_rs::Btf, t: &Type, name: &str) -> Option<(u32, btf_rs::Member)> {
    let members = members(t);
    let names: Vec<String> = members
        .iter()
        .map(|m| btf.resolve_name(m).unwrap_or_default())
        .collect();
    if let Some(i) = names.iter().position(|n| n == name) {
        return Some((members[i].bit_offset(), members[i].clone()));
    }
    for (m, n) in members.iter().zip(&names) {
        if n.is_empty()
            && let Some(inner) = btf
                .resolve_chained_type(m)
                .ok()
                .and_then(|t| resolve(btf, t))
            && let Some((off, found)) = find_member(btf, &inner, name)
        {
            return Some((m.bit_offset() + off, found));
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod fixture;

#[cfg(test)]
mod tests {
    use super::fixture::*;
    use super::*;

    #[test]
    fn offsets_through_anonymous_members() {
        let btf = Btf::parse(&sample_btf()).unwrap();
        // struct outer { int a; union { int b; struct { short c; short d; }; }; struct inner in; };
        assert_eq!(btf.member_offset("outer", "a").unwrap(), 0);
        assert_eq!(btf.member_offset("outer", "b").unwrap(), 4);
        assert_eq!(btf.member_offset("outer", "d").unwrap(), 6);
        assert_eq!(btf.member_offset("outer", "in.x").unwrap(), 8 + 4);
        assert_eq!(btf.member_offset("outer", "arr[1].x").unwrap(), 16 + 8 + 4);
        assert!(matches!(
            btf.member_offset("outer", "nope"),
            Err(BtfError::Missing(_))
        ));
        assert!(btf.member_offset("nostruct", "a").is_err());
    }

    #[test]
    fn enums_and_tracepoint_arity() {
        let btf = Btf::parse(&sample_btf()).unwrap();
        let v = btf.enum_values("skb_drop_reason").unwrap();
        assert_eq!(v[0], ("SKB_NOT_DROPPED_YET".to_string(), 0));
        assert_eq!(v[2], ("SKB_DROP_REASON_NO_SOCKET".to_string(), 3));
        assert_eq!(btf.tracepoint_arity("kfree_skb"), Some(3));
        assert_eq!(btf.tracepoint_arity("missing"), None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Btf::parse(b"not btf at all, really not").is_err());
        let mut b = sample_btf();
        b.truncate(30);
        assert!(Btf::parse(&b).is_err());
    }

    #[test]
    fn module_split_btf_beside_vmlinux() {
        let mut w = Writer::new();
        let int = w.int("int", 4);
        let ptr = w.ptr(0);
        let fp = w.func_proto(int, &[ptr]);
        w.func("ip_forward", fp);
        // Two modules: their ids overlap (both start after vmlinux's).
        let mut nft = w.split();
        nft.composite(
            false,
            "nft_chain",
            16,
            &[("table", ptr, 0), ("name", ptr, 64)],
        );
        let fp = nft.func_proto(int, &[ptr, ptr, ptr]);
        nft.func("nft_do_chain", fp);
        let mut xt = w.split();
        xt.composite(
            false,
            "xt_table",
            8,
            &[("valid_hooks", int, 0), ("name", ptr, 32)],
        );
        let dir = std::env::temp_dir().join(format!("tracer-btf-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vmlinux"), w.finish()).unwrap();
        std::fs::write(dir.join("nf_tables"), nft.finish()).unwrap();
        std::fs::write(dir.join("x_tables"), xt.finish()).unwrap();
        std::fs::write(dir.join("broken"), b"not btf").unwrap();
        let btf = Btf::with_modules(&dir.join("vmlinux"));
        std::fs::remove_dir_all(&dir).unwrap();
        let btf = btf.unwrap();
        // void, int, ptr, proto, func; 3 + 1.
        assert_eq!(btf.len(), 5 + 3 + 1);
        assert!(btf.has_type("nft_chain") && btf.has_type("xt_table"));
        assert_eq!(btf.member_offset("nft_chain", "name").unwrap(), 8);
        assert_eq!(btf.member_offset("xt_table", "name").unwrap(), 4);
        assert_eq!(btf.func_in_vmlinux("ip_forward"), Some(true));
        assert_eq!(btf.func_in_vmlinux("nft_do_chain"), Some(false));
        assert_eq!(btf.func_in_vmlinux("nope"), None);
        assert_eq!(btf.func_arg_count("nft_do_chain"), Some(3));
    }

    #[test]
    fn mapped_copy_when_the_file_cannot_be_mapped() {
        let p = std::env::temp_dir().join(format!("tracer-btf-copy-{}", std::process::id()));
        std::fs::write(&p, sample_btf()).unwrap();
        let b = map_copy(&p);
        std::fs::remove_file(&p).unwrap();
        let btf = Btf {
            base: b.unwrap(),
            modules: Vec::new(),
            ids: RefCell::default(),
            scans: std::cell::Cell::default(),
        };
        assert_eq!(btf.member_offset("outer", "arr[1].x").unwrap(), 28);
        assert_eq!(btf.func_arg_count("fib_validate_source"), Some(8));
    }

    #[test]
    fn prefetched_names_need_no_pass_of_their_own() {
        let p = std::env::temp_dir().join(format!("tracer-btf-pre-{}", std::process::id()));
        std::fs::write(&p, sample_btf()).unwrap();
        let btf = Btf::from_file(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        let plain = Btf::parse(&sample_btf()).unwrap();
        btf.prefetch(["outer", "fib_validate_source", "no_such_type"]);
        assert_eq!(btf.scans(), 0);
        assert_eq!(
            btf.member_offset("outer", "arr[1].x").unwrap(),
            plain.member_offset("outer", "arr[1].x").unwrap()
        );
        assert_eq!(btf.func_arg_count("fib_validate_source"), Some(8));
        assert!(!btf.has_type("no_such_type"));
        assert_eq!(btf.scans(), 0, "answered from the prefetched names");
        // A name not prefetched still resolves, by a pass of its own.
        assert!(btf.has_type("inner") == plain.has_type("inner"));
        assert_eq!(btf.scans(), 1);
    }

    #[test]
    fn running_kernel_when_present() {
        // Exercises the reader on the real vmlinux when the machine has
        // one; the fixtures above cover the logic everywhere.
        let p = Path::new("/sys/kernel/btf/vmlinux");
        if !p.exists() {
            eprintln!("no /sys/kernel/btf/vmlinux: real-BTF check not run");
            return;
        }
        let btf = Btf::from_file(p).unwrap();
        assert!(btf.len() > 1000);
        assert!(btf.member_offset("sk_buff", "len").is_ok());
        assert!(btf.enum_values("skb_drop_reason").is_some());
    }
}
