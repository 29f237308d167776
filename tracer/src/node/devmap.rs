//! A device map's entry: where an XDP program's bpf_redirect_map() into a
//! BPF_MAP_TYPE_DEVMAP or DEVMAP_HASH sends a packet. The xdp_redirect
//! tracepoints give the map's id and the key (tracer-ebpf xdp.rs); the
//! entry's value starts with the target's ifindex (struct
//! bpf_devmap_val, or a bare u32 in maps made before 5.8), in the
//! namespace of whoever filled it in (dev_map_update_elem()).

use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{MapInfo, MapType};

/// The ifindex device map `map_id` holds at `key` now; None when the map
/// is gone, is not a device map, or has no such entry.
pub fn target(map_id: u32, key: u32) -> Option<u32> {
    let info = MapInfo::from_id(map_id).ok()?;
    if !matches!(info.map_type(), Ok(MapType::DevMap | MapType::DevMapHash))
        || info.key_size() != 4
        || info.value_size() < 4
    {
        return None;
    }
    let fd = info.fd().ok()?;
    let mut value = vec![0u8; info.value_size() as usize];
    lookup(fd.as_fd().as_raw_fd(), &key.to_ne_bytes(), &mut value)?;
    Some(u32::from_ne_bytes(value[..4].try_into().ok()?))
}

/// BPF_MAP_LOOKUP_ELEM of `key` into `value` (sized as the map's values).
fn lookup(fd: i32, key: &[u8], value: &mut [u8]) -> Option<()> {
    const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
    // union bpf_attr: map_fd (u32), pad, key (u64 pointer), value (u64
    // pointer), flags (u64).
    let mut attr = [0u8; 32];
    attr[0..4].copy_from_slice(&fd.to_ne_bytes());
    attr[8..16].copy_from_slice(&(key.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(value.as_mut_ptr() as u64).to_ne_bytes());
    // SAFETY: attr is a valid bpf_attr prefix of the size passed; the
    // kernel reads key_size bytes of `key` and writes value_size bytes
    // into `value` (checked against the map's info), both outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_LOOKUP_ELEM,
            attr.as_mut_ptr(),
            attr.len() as u32,
        )
    };
    (r == 0).then_some(())
}

#[cfg(test)]
mod tests {
    /// A map that does not exist (or is not a device map) names nothing.
    #[test]
    fn no_such_map_names_nothing() {
        assert_eq!(super::target(u32::MAX, 0), None);
    }
}
