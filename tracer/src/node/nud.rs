//! Neighbour (ARP/NDP) states: the kernel's NUD_* bits and their names,
//! as neighbour hops and node facts show them.

use serde::{Deserialize, Serialize};

/// NUD_* neighbour states (include/uapi/linux/neighbour.h), by bit.
const NUD: [(u8, &str); 8] = [
    (0x01, "INCOMPLETE"),
    (0x02, "REACHABLE"),
    (0x04, "STALE"),
    (0x08, "DELAY"),
    (0x10, "PROBE"),
    (0x20, "FAILED"),
    (0x40, "NOARP"),
    (0x80, "PERMANENT"),
];

/// NUD_* neighbour states, a bit set; as text the set names joined by `|`.
pub fn nud_state(s: u8) -> String {
    let v: Vec<&str> = NUD
        .iter()
        .filter(|(b, _)| s & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "NONE".into()
    } else {
        v.join("|")
    }
}

/// A neighbour entry's NUD_* state bits (the kernel's `nud_state`).
/// Serialised as its names (`"FAILED"`, `"INCOMPLETE|FAILED"`, `"NONE"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Nud(pub u8);

impl Nud {
    pub const INCOMPLETE: Nud = Nud(0x01);
    pub const REACHABLE: Nud = Nud(0x02);
    pub const FAILED: Nud = Nud(0x20);

    /// Are all of `other`'s bits set?
    pub fn contains(self, other: Nud) -> bool {
        self.0 & other.0 == other.0
    }

    /// Inverse of the text form: every `|`-separated name must be known.
    pub fn from_names(s: &str) -> Option<Nud> {
        if s == "NONE" {
            return Some(Nud(0));
        }
        s.split('|').try_fold(Nud(0), |acc, n| {
            NUD.iter()
                .find(|(_, name)| *name == n)
                .map(|(b, _)| Nud(acc.0 | b))
        })
    }
}

impl std::fmt::Display for Nud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&nud_state(self.0))
    }
}

impl Serialize for Nud {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// NUD states by name, `|`-joined: `REACHABLE`, `INCOMPLETE|FAILED`.
impl schemars::JsonSchema for Nud {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Nud".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "NUD states by name, |-joined (include/uapi/linux/neighbour.h)"
        })
    }
}

impl<'de> Deserialize<'de> for Nud {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Nud, D::Error> {
        let s = String::deserialize(d)?;
        Nud::from_names(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown NUD state {s:?}")))
    }
}
