//! Shared immutable names (namespaces, devices, drop reasons, code
//! locations). A node has a handful of each, but every hop of every flow
//! carries them: as `String`s they were two heap blocks per hop, and 100k
//! flows took 156 MiB. A `Name` is one pointer-sized handle to a string held
//! once by the [`Interner`].

use std::{fmt, ops::Deref, sync::Arc};

use foldhash::HashSet;

use serde::{Deserialize, Serialize};

/// A thin pointer (8 bytes, against 16 for `Arc<str>`): hops hold several.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Name(Arc<Box<str>>);

impl Name {
    pub fn as_str(&self) -> &str {
        &self.0[..]
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0[..]
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0[..]
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self.0, f)
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name(Arc::new(Box::from(s)))
    }
}

impl From<String> for Name {
    fn from(s: String) -> Name {
        Name(Arc::new(s.into_boxed_str()))
    }
}

impl From<Name> for String {
    fn from(n: Name) -> String {
        n.0.to_string()
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, o: &str) -> bool {
        self.as_str() == o
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, o: &&str) -> bool {
        self.as_str() == *o
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, o: &String) -> bool {
        self.as_str() == o.as_str()
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, o: &Name) -> bool {
        self.as_str() == o.as_str()
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, o: &Name) -> bool {
        self == o.as_str()
    }
}

impl Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self)
    }
}

/// A name is a string in JSON.
impl schemars::JsonSchema for Name {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Name".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string"})
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
        String::deserialize(d).map(Name::from)
    }
}

/// Hands out one shared [`Name`] per distinct string. Bounded: past
/// `MAX_NAMES` distinct strings (e.g. code locations of a busy kernel) new
/// ones are no longer remembered, only allocated.
#[derive(Debug, Default)]
pub struct Interner {
    set: HashSet<Name>,
}

const MAX_NAMES: usize = 16_384;

impl Interner {
    pub fn get(&mut self, s: &str) -> Name {
        if let Some(a) = self.set.get(s) {
            return a.clone();
        }
        let a = Name::from(s);
        if self.set.len() < MAX_NAMES {
            self.set.insert(a.clone());
        }
        a
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_allocation_per_distinct_string() {
        let mut i = Interner::default();
        let a = i.get("eth0");
        let b = i.get("eth0");
        let c = i.get("lxc0");
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert!(!Arc::ptr_eq(&a.0, &c.0));
        assert_eq!(i.len(), 2);
        assert_eq!(a, "eth0");
        assert_eq!(format!("{a}/{c:?}"), "eth0/\"lxc0\"");
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"eth0\"");
        let back: Name = serde_json::from_str("\"eth0\"").unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn a_name_is_one_pointer() {
        assert_eq!(std::mem::size_of::<Name>(), 8);
    }
}
