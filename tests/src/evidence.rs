//! A flow's verdict evidence as `-o json` gives it (schema v2): an array of
//! objects `{"kind": "<fact kind>", ...its fields, "text": "<sentence>"}`,
//! with `count` when the same fact was seen several times.

use serde_json::Value;

/// The evidence items of a flow record. Panics unless each is an object
/// with a string `kind` and `text`.
pub fn items(flow: &Value) -> &[Value] {
    let a = flow["verdict"]["evidence"]
        .as_array()
        .unwrap_or_else(|| panic!("no evidence array: {flow}"));
    for e in a {
        assert!(
            e["kind"].is_string() && e["text"].is_string(),
            "evidence item without kind and text: {e}"
        );
    }
    a
}

/// The items of one kind.
pub fn of_kind<'a>(flow: &'a Value, kind: &str) -> Vec<&'a Value> {
    items(flow).iter().filter(|e| e["kind"] == kind).collect()
}

/// Is there an item of this kind?
pub fn has(flow: &Value, kind: &str) -> bool {
    !of_kind(flow, kind).is_empty()
}

/// The sentences, one a line, as text output prints them.
pub fn text(flow: &Value) -> String {
    items(flow)
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A string field of an item ("" when absent).
pub fn field<'a>(e: &'a Value, name: &str) -> &'a str {
    e[name].as_str().unwrap_or_default()
}
