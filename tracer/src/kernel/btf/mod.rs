//! A small reader for the kernel's BTF (`/sys/kernel/btf/vmlinux`, and
//! module BTF split on top of it): struct member offsets through anonymous
//! members, enum value names, tracepoint prototypes.
//!
//! Format: include/uapi/linux/btf.h.

pub mod offsets;

use std::{collections::HashMap, path::Path};

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

const MAGIC: u16 = 0xeb9f;

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

pub mod kinds {
    pub const INT: u8 = 1;
    pub const PTR: u8 = 2;
    pub const ARRAY: u8 = 3;
    pub const STRUCT: u8 = 4;
    pub const UNION: u8 = 5;
    pub const ENUM: u8 = 6;
    pub const FWD: u8 = 7;
    pub const TYPEDEF: u8 = 8;
    pub const VOLATILE: u8 = 9;
    pub const CONST: u8 = 10;
    pub const RESTRICT: u8 = 11;
    pub const FUNC: u8 = 12;
    pub const FUNC_PROTO: u8 = 13;
    pub const VAR: u8 = 14;
    pub const DATASEC: u8 = 15;
    pub const FLOAT: u8 = 16;
    pub const DECL_TAG: u8 = 17;
    pub const TYPE_TAG: u8 = 18;
    pub const ENUM64: u8 = 19;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub type_id: u32,
    /// Offset in bits from the start of the enclosing struct/union.
    pub bit_offset: u32,
    /// Bitfield size in bits, 0 for a normal member.
    pub bitfield_size: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    Int {
        name: String,
        size: u32,
    },
    Ptr {
        target: u32,
    },
    Array {
        elem: u32,
        nelems: u32,
    },
    Struct {
        name: String,
        size: u32,
        members: Vec<Member>,
    },
    Union {
        name: String,
        size: u32,
        members: Vec<Member>,
    },
    Enum {
        name: String,
        size: u32,
        values: Vec<(String, i64)>,
    },
    /// typedef/volatile/const/restrict/type_tag: `target` is the real type.
    Alias {
        name: String,
        target: u32,
    },
    FuncProto {
        ret: u32,
        params: Vec<u32>,
    },
    /// A function; `proto` is its FUNC_PROTO.
    Func {
        name: String,
        proto: u32,
    },
    Other {
        name: String,
        kind: u8,
    },
}

/// Parsed BTF: `types[id]`, id 0 is void.
#[derive(Debug, Default)]
pub struct Btf {
    types: Vec<Type>,
    /// Type ids by a hash of their name (the names themselves are in
    /// `types`; a second copy of each, with a Vec per name, was ~10 MiB
    /// of the start-up peak). Lookups check the name.
    by_name: HashMap<u64, Ids>,
    /// Types below this id are vmlinux's; the rest come from modules.
    vmlinux_types: usize,
}

impl Drop for Btf {
    /// vmlinux's BTF parses into ~30 MiB of small blocks, which glibc
    /// keeps resident once freed: the next big allocation phase of the
    /// start (aya's own parse of the same BTF, right after) came on top of
    /// them and made the start-up peak (55 MiB). Hand the pages back here.
    fn drop(&mut self) {
        #[cfg(target_env = "gnu")]
        let big = self.types.len() > 10_000;
        self.types = Vec::new();
        self.by_name = HashMap::new();
        #[cfg(target_env = "gnu")]
        if big {
            // SAFETY: malloc_trim only releases free heap memory.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }
}

/// The ids under one name hash: nearly always one, kept inline.
#[derive(Debug)]
enum Ids {
    One(u32),
    Many(Vec<u32>),
}

impl Default for Ids {
    fn default() -> Ids {
        Ids::Many(Vec::new())
    }
}

impl Ids {
    fn push(&mut self, id: u32) {
        match self {
            Ids::Many(v) if v.is_empty() => *self = Ids::One(id),
            Ids::One(a) => *self = Ids::Many(vec![*a, id]),
            Ids::Many(v) => v.push(id),
        }
    }

    fn as_slice(&self) -> &[u32] {
        match self {
            Ids::One(a) => std::slice::from_ref(a),
            Ids::Many(v) => v,
        }
    }
}

fn name_hash(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, BtfError> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| BtfError::Malformed(format!("truncated at {off}")))
}

impl Btf {
    pub fn from_file(path: &Path) -> Result<Btf, BtfError> {
        let data = std::fs::read(path).map_err(|source| BtfError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Btf::parse(&data)
    }

    /// The running kernel's BTF: vmlinux plus every module's split BTF.
    pub fn from_sys() -> Result<Btf, BtfError> {
        let vmlinux = vmlinux_path();
        let dir = vmlinux.parent().unwrap_or(Path::new("/sys/kernel/btf"));
        let base_data = std::fs::read(&vmlinux).map_err(|source| BtfError::Io {
            path: vmlinux.display().to_string(),
            source,
        })?;
        let mut btf = Btf::parse(&base_data)?;
        let base_count = btf.types.len();
        if let Ok(rd) = std::fs::read_dir(dir) {
            let mut mods: Vec<_> = rd.flatten().map(|e| e.path()).collect();
            mods.sort();
            for p in mods {
                if p.file_name().is_some_and(|n| n == "vmlinux") {
                    continue;
                }
                if let Ok(data) = std::fs::read(&p) {
                    // A module that fails to parse is skipped: its types are
                    // only needed for module hooks, reported elsewhere.
                    let _ = btf.add_split(&data, &base_data, base_count);
                }
            }
        }
        Ok(btf)
    }

    /// Parse standalone BTF (vmlinux).
    pub fn parse(data: &[u8]) -> Result<Btf, BtfError> {
        let mut btf = Btf {
            types: vec![Type::Other {
                name: String::new(),
                kind: 0,
            }],
            by_name: HashMap::new(),
            vmlinux_types: 0,
        };
        btf.parse_types(data, None)?;
        btf.vmlinux_types = btf.types.len();
        Ok(btf)
    }

    /// Append a module's split BTF. Its type ids continue after vmlinux's
    /// (`base_count` types) and its string offsets after vmlinux's strings;
    /// the appended types are renumbered to follow the types already loaded.
    fn add_split(&mut self, data: &[u8], base: &[u8], base_count: usize) -> Result<(), BtfError> {
        let start = self.types.len();
        let base_strs = str_section(base)?.len();
        let mut m = Btf {
            types: Vec::new(),
            by_name: HashMap::new(),
            vmlinux_types: 0,
        };
        m.parse_types(data, Some((base, base_strs)))?;
        let shift = (start - base_count) as u32;
        for t in std::mem::take(&mut m.types) {
            let t = shift_ids(t, base_count as u32, shift);
            let id = self.types.len() as u32;
            if let Some(n) = type_name(&t)
                && !n.is_empty()
            {
                self.by_name.entry(name_hash(n)).or_default().push(id);
            }
            self.types.push(t);
        }
        Ok(())
    }

    #[expect(
        clippy::too_many_lines,
        clippy::match_same_arms,
        reason = "one arm per BTF kind as in include/uapi/linux/btf.h, each with its own record size"
    )]
    fn parse_types(&mut self, data: &[u8], base: Option<(&[u8], usize)>) -> Result<(), BtfError> {
        if data.len() < 24 || u16::from_le_bytes([data[0], data[1]]) != MAGIC {
            return Err(BtfError::Malformed("bad magic".into()));
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let types = data
            .get(hdr_len + type_off..hdr_len + type_off + type_len)
            .ok_or_else(|| BtfError::Malformed("type section out of range".into()))?;
        let strs = str_section(data)?;
        let base_strs = base.map(|(b, n)| (str_section(b).ok(), n));
        let name = |off: u32| -> String {
            let off = off as usize;
            let (s, o) = match base_strs {
                Some((Some(bs), n)) if off < n => (bs, off),
                Some((_, n)) => (strs, off.saturating_sub(n)),
                None => (strs, off),
            };
            cstr(s, o)
        };
        let mut p = 0usize;
        while p + 12 <= types.len() {
            let name_off = u32_at(types, p)?;
            let info = u32_at(types, p + 4)?;
            let size_type = u32_at(types, p + 8)?;
            p += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = ((info >> 24) & 0x1f) as u8;
            let kflag = info >> 31 == 1;
            let n = name(name_off);
            let t = match kind {
                kinds::INT => {
                    p += 4;
                    Type::Int {
                        name: n,
                        size: size_type,
                    }
                }
                kinds::PTR => Type::Ptr { target: size_type },
                kinds::ARRAY => {
                    let elem = u32_at(types, p)?;
                    let nelems = u32_at(types, p + 8)?;
                    p += 12;
                    Type::Array { elem, nelems }
                }
                kinds::STRUCT | kinds::UNION => {
                    let mut members = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let mn = u32_at(types, p)?;
                        let mt = u32_at(types, p + 4)?;
                        let mo = u32_at(types, p + 8)?;
                        p += 12;
                        let (bit_offset, bitfield_size) = if kflag {
                            (mo & 0xff_ffff, mo >> 24)
                        } else {
                            (mo, 0)
                        };
                        members.push(Member {
                            name: name(mn),
                            type_id: mt,
                            bit_offset,
                            bitfield_size,
                        });
                    }
                    if kind == kinds::STRUCT {
                        Type::Struct {
                            name: n,
                            size: size_type,
                            members,
                        }
                    } else {
                        Type::Union {
                            name: n,
                            size: size_type,
                            members,
                        }
                    }
                }
                kinds::ENUM => {
                    let mut values = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let vn = u32_at(types, p)?;
                        let v = u32_at(types, p + 4)? as i32;
                        p += 8;
                        let v = if kflag { v as i64 } else { v as u32 as i64 };
                        values.push((name(vn), v));
                    }
                    Type::Enum {
                        name: n,
                        size: size_type,
                        values,
                    }
                }
                kinds::ENUM64 => {
                    let mut values = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let vn = u32_at(types, p)?;
                        let lo = u32_at(types, p + 4)? as u64;
                        let hi = u32_at(types, p + 8)? as u64;
                        p += 12;
                        values.push((name(vn), ((hi << 32) | lo) as i64));
                    }
                    Type::Enum {
                        name: n,
                        size: size_type,
                        values,
                    }
                }
                kinds::TYPEDEF
                | kinds::VOLATILE
                | kinds::CONST
                | kinds::RESTRICT
                | kinds::TYPE_TAG => Type::Alias {
                    name: n,
                    target: size_type,
                },
                kinds::FUNC_PROTO => {
                    let mut params = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        params.push(u32_at(types, p + 4)?);
                        p += 8;
                    }
                    Type::FuncProto {
                        ret: size_type,
                        params,
                    }
                }
                kinds::VAR => {
                    p += 4;
                    Type::Other { name: n, kind }
                }
                kinds::DATASEC => {
                    p += 12 * vlen;
                    Type::Other { name: n, kind }
                }
                kinds::DECL_TAG => {
                    p += 4;
                    Type::Other { name: n, kind }
                }
                kinds::FUNC => Type::Func {
                    name: n,
                    proto: size_type,
                },
                kinds::FWD | kinds::FLOAT => Type::Other { name: n, kind },
                k => return Err(BtfError::Malformed(format!("unknown kind {k}"))),
            };
            let id = self.types.len() as u32;
            if let Some(n) = type_name(&t)
                && !n.is_empty()
            {
                self.by_name.entry(name_hash(n)).or_default().push(id);
            }
            self.types.push(t);
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.types.len()
    }

    pub fn is_empty(&self) -> bool {
        self.types.len() <= 1
    }

    pub fn get(&self, id: u32) -> Option<&Type> {
        self.types.get(id as usize)
    }

    /// Follow typedef/const/volatile chains.
    pub fn resolve(&self, mut id: u32) -> Option<(u32, &Type)> {
        for _ in 0..32 {
            match self.get(id)? {
                Type::Alias { target, .. } => id = *target,
                t => return Some((id, t)),
            }
        }
        None
    }

    /// Ids of the types named `name`, in id order.
    fn ids_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = u32> + 'a {
        self.by_name
            .get(&name_hash(name))
            .map_or(&[][..], Ids::as_slice)
            .iter()
            .copied()
            .filter(move |id| self.types.get(*id as usize).and_then(type_name) == Some(name))
    }

    /// The first struct (or union) with this name that has members.
    pub fn find_struct(&self, name: &str) -> Option<u32> {
        self.ids_named(name).find(|id| {
            matches!(self.get(*id), Some(Type::Struct { members, .. } | Type::Union { members, .. }) if !members.is_empty())
        })
    }

    pub fn type_size(&self, id: u32) -> Option<u32> {
        match self.resolve(id)?.1 {
            Type::Int { size, .. }
            | Type::Struct { size, .. }
            | Type::Union { size, .. }
            | Type::Enum { size, .. } => Some(*size),
            Type::Ptr { .. } => Some(8),
            Type::Array { elem, nelems } => Some(self.type_size(*elem)? * nelems),
            _ => None,
        }
    }

    fn members(&self, id: u32) -> Option<&[Member]> {
        match self.resolve(id)?.1 {
            Type::Struct { members, .. } | Type::Union { members, .. } => Some(members),
            _ => None,
        }
    }

    /// Find a member by name in `id`, descending into anonymous members.
    /// Returns (bit offset, member).
    fn find_member(&self, id: u32, name: &str) -> Option<(u32, &Member)> {
        let members = self.members(id)?;
        for m in members {
            if m.name == name {
                return Some((m.bit_offset, m));
            }
        }
        for m in members {
            if m.name.is_empty()
                && let Some((off, found)) = self.find_member(m.type_id, name)
            {
                return Some((m.bit_offset + off, found));
            }
        }
        None
    }

    /// Byte offset of a dotted member path (`"nd_net.net"`, `"ns.inum"`),
    /// anonymous structs/unions included, in struct `st`. Array indexing is
    /// written `name[1]`.
    pub fn member_offset(&self, st: &str, path: &str) -> Result<u32, BtfError> {
        let missing = || BtfError::Missing(format!("{st}.{path}"));
        let mut id = self.find_struct(st).ok_or_else(missing)?;
        let mut bits = 0u32;
        for part in path.split('.') {
            let (field, index) = match part.split_once('[') {
                Some((f, rest)) => (f, rest.trim_end_matches(']').parse::<u32>().ok()),
                None => (part, None),
            };
            let (off, m) = self.find_member(id, field).ok_or_else(missing)?;
            if m.bitfield_size != 0 {
                return Err(BtfError::Missing(format!("{st}.{path} (bitfield)")));
            }
            bits += off;
            id = m.type_id;
            if let Some(i) = index {
                let (_, t) = self.resolve(id).ok_or_else(missing)?;
                let Type::Array { elem, .. } = t else {
                    return Err(missing());
                };
                let esz = self.type_size(*elem).ok_or_else(missing)?;
                bits += i * esz * 8;
                id = *elem;
            }
        }
        if !bits.is_multiple_of(8) {
            return Err(BtfError::Missing(format!("{st}.{path} (not byte aligned)")));
        }
        Ok(bits / 8)
    }

    /// Values of an enum by name.
    pub fn enum_values(&self, name: &str) -> Option<&[(String, i64)]> {
        self.ids_named(name).find_map(|id| match self.get(id) {
            Some(Type::Enum { values, .. }) if !values.is_empty() => Some(values.as_slice()),
            _ => None,
        })
    }

    /// Number of arguments of a tp_btf tracepoint (`btf_trace_<name>` is a
    /// typedef to a pointer to `void (*)(void *__data, args...)`), without
    /// the leading `__data`.
    /// Is there a type (struct, function, ...) of this name?
    pub fn has_type(&self, name: &str) -> bool {
        self.ids_named(name).next().is_some()
    }

    /// Where function `name` is described: `Some(true)` in vmlinux's own
    /// BTF (fentry/fexit can attach to it), `Some(false)` only in a module's,
    /// None nowhere (not a traceable function on this kernel: absent, or
    /// inlined everywhere).
    pub fn func_in_vmlinux(&self, name: &str) -> Option<bool> {
        let mut found = None;
        for id in self.ids_named(name) {
            if let Some(Type::Func { .. }) = self.types.get(id as usize) {
                if (id as usize) < self.vmlinux_types {
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
        self.ids_named(name).find_map(|id| {
            let Some(Type::Func { proto, .. }) = self.types.get(id as usize) else {
                return None;
            };
            match self.resolve(*proto)?.1 {
                Type::FuncProto { params, .. } => Some(params.len()),
                _ => None,
            }
        })
    }

    pub fn tracepoint_arity(&self, tp: &str) -> Option<usize> {
        let key = format!("btf_trace_{tp}");
        let id = self.ids_named(&key).next()?;
        let (_, t) = self.resolve(id)?;
        let Type::Ptr { target } = t else {
            return None;
        };
        match self.resolve(*target)?.1 {
            Type::FuncProto { params, .. } => Some(params.len().saturating_sub(1)),
            _ => None,
        }
    }
}

fn type_name(t: &Type) -> Option<&str> {
    match t {
        Type::Int { name, .. }
        | Type::Struct { name, .. }
        | Type::Union { name, .. }
        | Type::Enum { name, .. }
        | Type::Alias { name, .. }
        | Type::Func { name, .. }
        | Type::Other { name, .. } => Some(name),
        _ => None,
    }
}

fn shift_ids(t: Type, base_count: u32, shift: u32) -> Type {
    let s = |id: u32| if id >= base_count { id + shift } else { id };
    match t {
        Type::Ptr { target } => Type::Ptr { target: s(target) },
        Type::Func { name, proto } => Type::Func {
            name,
            proto: s(proto),
        },
        Type::Array { elem, nelems } => Type::Array {
            elem: s(elem),
            nelems,
        },
        Type::Struct {
            name,
            size,
            members,
        } => Type::Struct {
            name,
            size,
            members: members
                .into_iter()
                .map(|m| Member {
                    type_id: s(m.type_id),
                    ..m
                })
                .collect(),
        },
        Type::Union {
            name,
            size,
            members,
        } => Type::Union {
            name,
            size,
            members: members
                .into_iter()
                .map(|m| Member {
                    type_id: s(m.type_id),
                    ..m
                })
                .collect(),
        },
        Type::Alias { name, target } => Type::Alias {
            name,
            target: s(target),
        },
        Type::FuncProto { ret, params } => Type::FuncProto {
            ret: s(ret),
            params: params.into_iter().map(s).collect(),
        },
        t => t,
    }
}

fn str_section(data: &[u8]) -> Result<&[u8], BtfError> {
    let hdr_len = u32_at(data, 4)? as usize;
    let str_off = u32_at(data, 16)? as usize;
    let str_len = u32_at(data, 20)? as usize;
    data.get(hdr_len + str_off..hdr_len + str_off + str_len)
        .ok_or_else(|| BtfError::Malformed("string section out of range".into()))
}

fn cstr(s: &[u8], off: usize) -> String {
    let Some(rest) = s.get(off..) else {
        return String::new();
    };
    let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end]).into_owned()
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
    fn running_kernel_when_present() {
        // Exercises the parser on the real vmlinux when the machine has one;
        // the fixtures above cover the logic everywhere.
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
