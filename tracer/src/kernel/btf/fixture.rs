//! A hand-built BTF blob for unit tests (no kernel needed).

/// BTF kind numbers (include/uapi/linux/btf.h) of the records written here.
mod kinds {
    pub(super) const INT: u8 = 1;
    pub(super) const PTR: u8 = 2;
    pub(super) const ARRAY: u8 = 3;
    pub(super) const STRUCT: u8 = 4;
    pub(super) const UNION: u8 = 5;
    pub(super) const ENUM: u8 = 6;
    pub(super) const TYPEDEF: u8 = 8;
    pub(super) const FUNC: u8 = 12;
    pub(super) const FUNC_PROTO: u8 = 13;
}

#[derive(Default)]
pub(crate) struct Writer {
    types: Vec<u8>,
    strs: Vec<u8>,
    next_id: u32,
    /// For split BTF (a module's): the base's string section length, where
    /// this one's string offsets start.
    base_strs: u32,
}

impl Writer {
    pub(crate) fn new() -> Self {
        Writer {
            types: Vec::new(),
            strs: vec![0],
            next_id: 1,
            base_strs: 0,
        }
    }

    /// A module's split BTF on top of what `self` has written so far: its
    /// type ids and string offsets continue after the base's.
    pub(crate) fn split(&self) -> Self {
        Writer {
            types: Vec::new(),
            strs: Vec::new(),
            next_id: self.next_id,
            base_strs: self.strs.len() as u32,
        }
    }

    pub(crate) fn s(&mut self, name: &str) -> u32 {
        if name.is_empty() {
            return 0;
        }
        let off = self.base_strs + self.strs.len() as u32;
        self.strs.extend_from_slice(name.as_bytes());
        self.strs.push(0);
        off
    }

    fn head(&mut self, name: &str, kind: u8, vlen: u32, kflag: bool, size_type: u32) -> u32 {
        let n = self.s(name);
        let info = (vlen & 0xffff) | ((kind as u32) << 24) | if kflag { 1 << 31 } else { 0 };
        for v in [n, info, size_type] {
            self.types.extend_from_slice(&v.to_le_bytes());
        }
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn u32s(&mut self, vals: &[u32]) {
        for v in vals {
            self.types.extend_from_slice(&v.to_le_bytes());
        }
    }

    pub(crate) fn int(&mut self, name: &str, size: u32) -> u32 {
        let id = self.head(name, kinds::INT, 0, false, size);
        self.u32s(&[size * 8]);
        id
    }

    pub(crate) fn ptr(&mut self, target: u32) -> u32 {
        self.head("", kinds::PTR, 0, false, target)
    }

    pub(crate) fn array(&mut self, elem: u32, index: u32, n: u32) -> u32 {
        let id = self.head("", kinds::ARRAY, 0, false, 0);
        self.u32s(&[elem, index, n]);
        id
    }

    /// members: (name, type, bit offset)
    pub(crate) fn composite(
        &mut self,
        union: bool,
        name: &str,
        size: u32,
        members: &[(&str, u32, u32)],
    ) -> u32 {
        let kind = if union { kinds::UNION } else { kinds::STRUCT };
        let id = self.head(name, kind, members.len() as u32, false, size);
        for (n, t, off) in members {
            let n = self.s(n);
            self.u32s(&[n, *t, *off]);
        }
        id
    }

    pub(crate) fn enumeration(&mut self, name: &str, values: &[(&str, u32)]) -> u32 {
        let id = self.head(name, kinds::ENUM, values.len() as u32, false, 4);
        for (n, v) in values {
            let n = self.s(n);
            self.u32s(&[n, *v]);
        }
        id
    }

    pub(crate) fn typedef(&mut self, name: &str, target: u32) -> u32 {
        self.head(name, kinds::TYPEDEF, 0, false, target)
    }

    pub(crate) fn func_proto(&mut self, ret: u32, params: &[u32]) -> u32 {
        let id = self.head("", kinds::FUNC_PROTO, params.len() as u32, false, ret);
        for p in params {
            self.u32s(&[0, *p]);
        }
        id
    }

    pub(crate) fn func(&mut self, name: &str, proto: u32) -> u32 {
        // vlen 1: global linkage.
        self.head(name, kinds::FUNC, 1, false, proto)
    }

    pub(crate) fn finish(self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&0xeb9fu16.to_le_bytes());
        out.push(1); // version
        out.push(0); // flags
        out.extend_from_slice(&24u32.to_le_bytes()); // hdr_len
        out.extend_from_slice(&0u32.to_le_bytes()); // type_off
        out.extend_from_slice(&(self.types.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.types.len() as u32).to_le_bytes()); // str_off
        out.extend_from_slice(&(self.strs.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strs);
        out
    }
}

/// struct inner { int w; int x; };                       size 8
/// struct outer {
///     int a;                                            @0
///     union { int b; struct { short c; short d; }; };   @4
///     struct inner in;                                  @8
///     struct inner arr[2];                              @16
/// };
/// enum skb_drop_reason { SKB_NOT_DROPPED_YET, SKB_CONSUMED, SKB_DROP_REASON_NO_SOCKET = 3 };
/// typedef void (*btf_trace_kfree_skb)(void *, void *skb, void *loc, enum skb_drop_reason);
/// int fib_validate_source(8 arguments); int ip_forward(void *skb);
pub(crate) fn sample_btf() -> Vec<u8> {
    let mut w = Writer::new();
    let int = w.int("int", 4);
    let short = w.int("short", 2);
    let inner = w.composite(false, "inner", 8, &[("w", int, 0), ("x", int, 32)]);
    let cd = w.composite(false, "", 4, &[("c", short, 0), ("d", short, 16)]);
    let u = w.composite(true, "", 4, &[("b", int, 0), ("", cd, 0)]);
    let arr = w.array(inner, int, 2);
    w.composite(
        false,
        "outer",
        32,
        &[
            ("a", int, 0),
            ("", u, 32),
            ("in", inner, 64),
            ("arr", arr, 128),
        ],
    );
    let e = w.enumeration(
        "skb_drop_reason",
        &[
            ("SKB_NOT_DROPPED_YET", 0),
            ("SKB_CONSUMED", 1),
            ("SKB_DROP_REASON_NO_SOCKET", 3),
        ],
    );
    let void_ptr = w.ptr(0);
    let fp = w.func_proto(0, &[void_ptr, void_ptr, void_ptr, e]);
    let p = w.ptr(fp);
    w.typedef("btf_trace_kfree_skb", p);
    // The device tracepoints (struct sk_buff *[, struct net_device *]).
    let rx = w.func_proto(0, &[void_ptr, void_ptr]);
    let rx = w.ptr(rx);
    w.typedef("btf_trace_netif_receive_skb", rx);
    let tx = w.func_proto(0, &[void_ptr, void_ptr, void_ptr]);
    let tx = w.ptr(tx);
    w.typedef("btf_trace_net_dev_start_xmit", tx);
    let fvs = w.func_proto(int, &[void_ptr; 8]);
    w.func("fib_validate_source", fvs);
    let fwd = w.func_proto(int, &[void_ptr]);
    w.func("ip_forward", fwd);
    w.finish()
}
