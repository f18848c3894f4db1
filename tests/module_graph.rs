//! No module cycles inside any crate: each source file's `use crate::…` / `use super::…`
//! imports (and `crate::…` paths in `pub use` re-exports) must form a directed acyclic graph.
//!
//! How an import is resolved to the module that defines it: the path is walked segment by
//! segment from the crate root (or the parent module for `super::`); a segment naming a child
//! module descends into it, a segment naming something a module re-exports (`pub use x::Name`)
//! jumps to the module it comes from, and anything else is defined in the module reached so
//! far. Inline test modules (from the first `#[cfg(test)]` on) are not part of the graph, and
//! neither are imports of the crate root itself (`lib.rs` only declares and re-exports).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's modules: module path ("" for the root, "a::b") → source text (tests cut off).
type Modules = BTreeMap<String, String>;

/// The module path of a source file relative to `src/`: `lib.rs` → "", `a/mod.rs` → "a",
/// `a/b.rs` → "a::b".
fn module_path(relative: &Path) -> String {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The `use` statements of a source (`use …;` and `pub use …;`, possibly over several lines).
fn use_statements(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in source.lines() {
        let trimmed = line.trim();
        if let Some(buffer) = current.as_mut() {
            buffer.push_str(trimmed);
        } else {
            let body = trimmed
                .strip_prefix("pub(crate) use ")
                .or_else(|| trimmed.strip_prefix("pub(super) use "))
                .or_else(|| trimmed.strip_prefix("pub use "))
                .or_else(|| trimmed.strip_prefix("use "));
            match body {
                Some(body) => current = Some(body.to_string()),
                None => continue,
            }
        }
        if current.as_ref().is_some_and(|b| b.contains(';')) {
            let statement = current.take().unwrap_or_default();
            out.push(statement.split(';').next().unwrap_or_default().to_string());
        }
    }
    out
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e` (renames `as x` dropped).
fn expand(statement: &str) -> Vec<String> {
    let statement: String = statement
        .replace(" as ", "@")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let Some(open) = statement.find('{') else {
        let path = statement.split('@').next().unwrap_or_default();
        return vec![path.trim_end_matches("::").to_string()];
    };
    let prefix = &statement[..open];
    let inner = &statement[open + 1..statement.rfind('}').unwrap_or(statement.len())];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|item| !item.is_empty())
        .flat_map(|item| expand(&format!("{prefix}{item}")))
        .collect()
}

fn join(base: &str, child: &str) -> String {
    if base.is_empty() {
        child.to_string()
    } else {
        format!("{base}::{child}")
    }
}

fn parent(module: &str) -> String {
    module
        .rsplit_once("::")
        .map(|(p, _)| p.to_string())
        .unwrap_or_default()
}

/// What each module re-exports by name: module → (name → the absolute path it comes from).
fn re_exports(modules: &Modules) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut map: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (module, source) in modules {
        for statement in use_statements(source) {
            for path in expand(&statement) {
                let Some(absolute) = absolute(module, &path, modules) else {
                    continue;
                };
                if let Some(name) = absolute.last() {
                    map.entry(module.clone())
                        .or_default()
                        .insert(name.clone(), absolute.clone());
                }
            }
        }
    }
    map
}

/// The segments of an import path made absolute from the crate root, or `None` for an
/// import from another crate.
fn absolute(module: &str, path: &str, modules: &Modules) -> Option<Vec<String>> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base = match segments.first() {
        Some(&"crate") => String::new(),
        Some(&"super") => module.to_string(),
        Some(&"self") => module.to_string(),
        Some(first) if modules.contains_key(&join(module, first)) => module.to_string(),
        _ => return None,
    };
    while let Some(&first) = segments.first() {
        match first {
            "crate" => {}
            "super" => base = parent(&base),
            "self" => {}
            _ => break,
        }
        segments.remove(0);
    }
    let mut out: Vec<String> = if base.is_empty() {
        Vec::new()
    } else {
        base.split("::").map(str::to_string).collect()
    };
    out.extend(segments.into_iter().map(str::to_string));
    Some(out)
}

/// The module that defines what an absolute path names.
fn resolve(
    path: &[String],
    modules: &Modules,
    exports: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
    depth: usize,
) -> String {
    let mut module = String::new();
    for (i, segment) in path.iter().enumerate() {
        let child = join(&module, segment);
        if modules.contains_key(&child) {
            module = child;
            continue;
        }
        if depth < 16
            && let Some(target) = exports.get(&module).and_then(|names| names.get(segment))
        {
            let mut rest = target.clone();
            rest.extend(path[i + 1..].iter().cloned());
            return resolve(&rest, modules, exports, depth + 1);
        }
        break;
    }
    module
}

/// The import graph of one crate: module → the modules it imports from (root excluded).
fn import_graph(modules: &Modules) -> BTreeMap<String, BTreeSet<String>> {
    let exports = re_exports(modules);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, source) in modules {
        let edges = graph.entry(module.clone()).or_default();
        if module.is_empty() {
            continue;
        }
        for statement in use_statements(source) {
            for path in expand(&statement) {
                let Some(absolute) = absolute(module, &path, modules) else {
                    continue;
                };
                let target = resolve(&absolute, modules, &exports, 0);
                // A module importing its own children (or itself) is not an edge of the cycle
                // check: a parent `mod.rs` that re-exports its children is their namespace.
                let own_child = target.starts_with(&format!("{module}::"));
                if !target.is_empty() && target != *module && !own_child {
                    edges.insert(target);
                }
            }
        }
    }
    graph
}

/// A cycle in the graph, as the list of modules around it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next).copied().unwrap_or(0) {
                1 => {
                    let start = stack.iter().position(|m| m == next).unwrap_or(0);
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(cycle) = visit(next, graph, state, stack) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if state.get(node).copied().unwrap_or(0) == 0
            && let Some(cycle) = visit(node, graph, &mut state, &mut Vec::new())
        {
            return Some(cycle);
        }
    }
    None
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Reads a crate's `src/` into [`Modules`], cutting each file at its first `#[cfg(test)]`.
fn load_crate(src: &Path) -> Modules {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let code = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or_default()
                .to_string();
            let relative = file.strip_prefix(src).unwrap_or(&file);
            (module_path(relative), code)
        })
        .collect()
}

fn synthetic(files: &[(&str, &str)]) -> Modules {
    files
        .iter()
        .map(|(m, s)| (m.to_string(), s.to_string()))
        .collect()
}

#[test]
fn the_checker_finds_a_cycle_through_a_root_re_export() {
    let modules = synthetic(&[
        (
            "",
            "mod a;\nmod b;\npub use a::Apple;\npub use b::{Banana, Bread};\n",
        ),
        ("a", "use crate::Banana;\npub struct Apple;\n"),
        (
            "b",
            "use crate::{\n    Apple as Fruit,\n};\npub struct Banana;\npub struct Bread;\n",
        ),
    ]);
    let graph = import_graph(&modules);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(graph["b"], BTreeSet::from(["a".to_string()]));
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".to_string(), "b".to_string(), "a".to_string()])
    );
}

#[test]
fn the_checker_resolves_super_and_nested_modules_without_false_cycles() {
    let modules = synthetic(&[
        (
            "",
            "mod frame;\nmod rate;\npub use frame::{Phase, Plugin};\n",
        ),
        ("rate", "pub struct Rate;\n"),
        (
            "frame",
            "mod data;\nmod plugin;\npub use data::Phase;\npub use plugin::Plugin;\n",
        ),
        ("frame::data", "use crate::rate::Rate;\npub enum Phase {}\n"),
        (
            "frame::plugin",
            "use super::Phase;\nuse crate::rate::Rate;\npub struct Plugin;\n",
        ),
    ]);
    let graph = import_graph(&modules);
    assert_eq!(
        graph["frame::plugin"],
        BTreeSet::from(["frame::data".to_string(), "rate".to_string()])
    );
    assert_eq!(graph["frame::data"], BTreeSet::from(["rate".to_string()]));
    assert_eq!(find_cycle(&graph), None);
}

#[test]
fn no_crate_has_a_module_cycle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut checked = 0;
    let mut cycles = Vec::new();
    for entry in std::fs::read_dir(&crates)
        .expect("crates/ is readable")
        .flatten()
    {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let modules = load_crate(&src);
        let graph = import_graph(&modules);
        let edges: usize = graph.values().map(BTreeSet::len).sum();
        let name = entry.file_name().to_string_lossy().to_string();
        if modules.len() > 3 {
            assert!(
                edges > 0,
                "{name}: {} modules but no import edge was found",
                modules.len()
            );
        }
        if let Some(cycle) = find_cycle(&graph) {
            cycles.push(format!("{name}: {}", cycle.join(" -> ")));
        }
        checked += 1;
    }
    assert!(
        checked >= 7,
        "expected the seven simsync crates (relay included), found {checked}"
    );
    assert!(cycles.is_empty(), "module cycles: {cycles:#?}");
}
