//! The layers of tracer/src/lib.rs: no module uses a layer after its own
//! (outside its tests), so there are no cycles between layers.

use std::path::Path;

const LAYERS: [&str; 9] = [
    "node", "model", "kernel", "verdict", "merge", "output", "run", "cluster", "cli",
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Layers a source text names as `crate::LAYER`, also inside grouped
/// `use crate::{...}` lists.
fn used_layers(text: &str) -> Vec<&'static str> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let mut used = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: what follows `{` or `,` at depth 0.
            let mut depth = 0;
            let mut items = vec![group];
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => items.push(&group[j + 1..]),
                    _ => {}
                }
            }
            items
        } else {
            vec![rest]
        };
        for n in names {
            let n = n.trim_start();
            if let Some(l) = LAYERS.iter().find(|l| {
                n.strip_prefix(**l).is_some_and(|r| {
                    r.starts_with("::") || r.starts_with(',') || r.starts_with('}')
                })
            }) {
                used.push(*l);
            }
        }
    }
    used
}

#[test]
fn no_layer_uses_a_later_one() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let Some(own) = LAYERS.iter().position(|l| rel.starts_with(l)) else {
            continue;
        };
        if rel
            .components()
            .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "tests.rs")
        {
            continue;
        }
        checked += 1;
        for used in used_layers(&std::fs::read_to_string(f).unwrap()) {
            let pos = LAYERS.iter().position(|l| *l == used).unwrap();
            if pos > own {
                wrong.push(format!("{} uses {used}", rel.display()));
            }
        }
    }
    assert!(checked > 30, "only {checked} files checked");
    assert!(wrong.is_empty(), "upward uses: {wrong:#?}");
}

#[test]
fn grouped_uses_are_seen() {
    assert_eq!(
        used_layers("use crate::{model::flow::Flow, verdict::{Env, Kind}};"),
        ["model", "verdict"]
    );
    assert_eq!(used_layers("let x = crate::run::live::follow;"), ["run"]);
    assert!(used_layers("#[cfg(test)]\nuse crate::cli::x;").is_empty());
}
