//! No module cycles inside any crate: the imports of each module — its `use crate::…` /
//! `use super::…` / `use self::…` statements and every `crate::…` / `super::…` / `self::…` path
//! written inline in its code — must form a directed acyclic graph.
//!
//! How an import is resolved to the module that defines it: the path is walked segment by
//! segment from the crate root (or the parent module for `super::`); a segment naming a child
//! module descends into it, a segment naming something a module re-exports (`pub use x::Name`)
//! jumps to the module it comes from, and anything else is defined in the module reached so
//! far. A module written inline (`pub mod prelude { … }`) is a module of its own, so the
//! prelude's re-exports of root names never hide where the root's names come from. Inline
//! test modules (from the first `#[cfg(test)]` on) and comments are not part of the graph, and
//! neither are imports of the crate root itself (`lib.rs` only declares and re-exports). Every
//! cycle is reported: each group of modules that reach each other (a strongly connected
//! component), with one path around it.

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

/// The source without comments (line comments, doc comments and block comments) and with
/// string and character literals emptied, so that a path is only read from code.
fn code_only(source: &str) -> String {
    let bytes: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < bytes.len() && bytes[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < bytes.len() {
                if bytes[i] == '/' && bytes.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if bytes[i] == '*' && bytes.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < bytes.len() && bytes[i] != '"' {
                i += if bytes[i] == '\\' { 2 } else { 1 };
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && next.is_some_and(|n| n != '\\') && bytes.get(i + 2) == Some(&'\'') {
            // A character literal such as '{' (a lifetime has no closing quote).
            out.push_str("' '");
            i += 3;
        } else if c == '\'' && next == Some('\\') {
            out.push('\'');
            i += 2;
            while i < bytes.len() && bytes[i] != '\'' {
                i += 1;
            }
            out.push('\'');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Every `crate::…`, `super::…` and `self::…` path written in code outside `use` statements
/// (e.g. `crate::dump::DesyncReport { … }`, `super::Phase::Setup`), `$crate::` excluded.
fn inline_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in code.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("use ") || trimmed.starts_with("pub use ") {
            continue;
        }
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let starts_word =
                i == 0 || !(chars[i - 1].is_alphanumeric() || "_$:".contains(chars[i - 1]));
            let rest: String = chars[i..].iter().collect();
            let keyword = ["crate::", "super::", "self::"]
                .into_iter()
                .find(|k| rest.starts_with(k));
            if let (true, Some(_)) = (starts_word, keyword) {
                let path: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                i += path.chars().count();
                out.push(path.trim_end_matches(':').to_string());
            } else {
                i += 1;
            }
        }
    }
    out
}

/// Splits a module's code into its own code and the modules written inline in it
/// (`mod name { … }`, `pub mod name { … }`), recursively: (own code, [(child name, child code)]).
fn split_inline_modules(code: &str) -> (String, Vec<(String, String)>) {
    let mut own = String::new();
    let mut children = Vec::new();
    let mut rest = code;
    while let Some(found) = find_inline_module(rest) {
        let (start, name, body_start) = found;
        own.push_str(&rest[..start]);
        let mut depth = 1;
        let mut end = rest.len();
        for (offset, c) in rest[body_start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = body_start + offset;
                        break;
                    }
                }
                _ => {}
            }
        }
        children.push((name, rest[body_start..end].to_string()));
        rest = &rest[(end + 1).min(rest.len())..];
    }
    own.push_str(rest);
    (own, children)
}

/// The next `mod name {` in code: (its byte offset, the name, the offset after its `{`).
fn find_inline_module(code: &str) -> Option<(usize, String, usize)> {
    let mut search = 0;
    while let Some(found) = code[search..].find("mod ") {
        let at = search + found;
        search = at + 4;
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let after = &code[at + 4..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let tail = after[name.len()..].trim_start();
        if !name.is_empty() && tail.starts_with('{') {
            let brace = at + 4 + name.len() + (after.len() - name.len() - tail.len());
            return Some((at, name, brace + 1));
        }
    }
    None
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
        let statements = use_statements(source);
        let paths = statements
            .iter()
            .flat_map(|statement| expand(statement))
            .chain(inline_paths(source));
        for path in paths {
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
    graph
}

/// Every cycle in the graph: one per group of modules that reach each other (a strongly
/// connected component of more than one module), as a path around it that starts and ends at
/// the group's first module. Empty when the graph is a DAG.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    cycle_groups(graph)
        .into_iter()
        .map(|(_, path)| path)
        .collect()
}

/// [`cycles`] with each cycle's whole group: (the group's modules, a path around it).
fn cycle_groups(
    graph: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<(BTreeSet<String>, Vec<String>)> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(node) = stack.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<String, BTreeSet<String>> = graph
        .keys()
        .map(|node| (node.clone(), reach(node)))
        .collect();
    let mut assigned = BTreeSet::new();
    let mut out = Vec::new();
    for node in graph.keys() {
        if assigned.contains(node) || !reachable[node].contains(node) {
            continue;
        }
        let group: BTreeSet<String> = reachable[node]
            .iter()
            .filter(|other| reachable.get(*other).is_some_and(|r| r.contains(node)))
            .cloned()
            .collect();
        assigned.extend(group.iter().cloned());
        let path = path_around(node, &group, graph);
        out.push((group, path));
    }
    out
}

/// A shortest path from `start` back to itself through the modules of `group`.
fn path_around(
    start: &str,
    group: &BTreeSet<String>,
    graph: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut came_from: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.to_string()]);
    while let Some(node) = queue.pop_front() {
        for next in graph.get(&node).into_iter().flatten() {
            if !group.contains(next) {
                continue;
            }
            if next == start {
                let mut path = vec![node.clone()];
                while let Some(previous) = came_from.get(path.last().unwrap_or(&node)) {
                    path.push(previous.clone());
                }
                if path.last().map(String::as_str) != Some(start) {
                    path.push(start.to_string());
                }
                path.reverse();
                path.push(start.to_string());
                return path;
            }
            if !came_from.contains_key(next) {
                came_from.insert(next.clone(), node.clone());
                queue.push_back(next.clone());
            }
        }
    }
    vec![start.to_string()]
}

/// The graph between top-level modules: each module stands for the top-level module it lies in
/// (`session::steps` → `session`); edges inside one top-level module are dropped.
fn top_level(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let top = |module: &str| module.split("::").next().unwrap_or_default().to_string();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, targets) in graph {
        let from = top(module);
        let edges = out.entry(from.clone()).or_default();
        edges.extend(targets.iter().map(|t| top(t)).filter(|t| *t != from));
    }
    out
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

/// Reads a crate's `src/` into [`Modules`]: each file cut at its first `#[cfg(test)]`, its
/// comments and literals removed, and its inline modules made modules of their own.
fn load_crate(src: &Path) -> Modules {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules = Modules::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let relative = file.strip_prefix(src).unwrap_or(&file);
        add_module(&mut modules, module_path(relative), &code_only(code));
    }
    modules
}

/// Adds a module and, as modules of their own, the modules written inline in it.
fn add_module(modules: &mut Modules, path: String, code: &str) {
    let (own, children) = split_inline_modules(code);
    for (name, body) in children {
        add_module(modules, join(&path, &name), &body);
    }
    modules.insert(path, own);
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
        cycles(&graph),
        vec![vec!["a".to_string(), "b".to_string(), "a".to_string()]]
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
    assert!(cycles(&graph).is_empty());
}

#[test]
fn an_inline_crate_path_is_an_import() {
    let modules = synthetic(&[
        ("", "mod a;\nmod b;\n"),
        (
            "a",
            "pub struct Apple;\nfn f() { let _ = crate::b::Banana { ripe: true }; }\n",
        ),
        (
            "b",
            "pub struct Banana { ripe: bool }\nfn g(_: super::a::Apple) {}\n",
        ),
    ]);
    let graph = import_graph(&modules);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(graph["b"], BTreeSet::from(["a".to_string()]));
    assert_eq!(cycles(&graph).len(), 1);
}

#[test]
fn comments_strings_and_macro_crate_paths_are_not_imports() {
    let source = "/// See [`crate::b::Banana`].\n// crate::b::x\n/* crate::b::y */\n\
        fn f() { let _ = \"crate::b::z\"; let _ = '{'; $crate::b::w }\n";
    let code = code_only(source);
    assert!(inline_paths(&code).is_empty(), "{:?}", inline_paths(&code));
    assert_eq!(
        inline_paths("let x = crate::b::Banana::new();"),
        vec!["crate::b::Banana::new".to_string()]
    );
}

#[test]
fn a_prelude_written_inline_does_not_hide_where_root_names_come_from() {
    let mut modules = Modules::new();
    add_module(
        &mut modules,
        String::new(),
        "mod a;\nmod b;\npub use a::Apple;\npub use b::Banana;\n\
         pub mod prelude {\n    pub use crate::{Apple, Banana};\n}\n",
    );
    add_module(
        &mut modules,
        "a".into(),
        "use crate::Banana;\npub struct Apple;\n",
    );
    add_module(
        &mut modules,
        "b".into(),
        "use crate::Apple;\npub struct Banana;\n",
    );
    assert!(modules.contains_key("prelude"));
    assert!(!modules[""].contains("prelude"));
    let graph = import_graph(&modules);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(
        cycles(&graph),
        vec![vec!["a".to_string(), "b".to_string(), "a".to_string()]]
    );
}

#[test]
fn every_cycle_is_reported_with_its_whole_group() {
    let modules = synthetic(&[
        ("", "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\n"),
        ("a", "use crate::b::B;\npub struct A;\n"),
        ("b", "use crate::c::C;\npub struct B;\n"),
        ("c", "use crate::a::A;\npub struct C;\n"),
        ("d", "use crate::e::E;\npub struct D;\n"),
        ("e", "use crate::d::D;\npub struct E;\n"),
    ]);
    let groups = cycle_groups(&import_graph(&modules));
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0].0.len(), 3);
    assert_eq!(groups[0].1, ["a", "b", "c", "a"]);
    assert_eq!(groups[1].1, ["d", "e", "d"]);
}

#[test]
fn top_level_modules_form_a_cycle_through_their_children() {
    let modules = synthetic(&[
        ("", "mod session;\nmod source;\n"),
        ("session", "mod steps;\nmod stats;\n"),
        ("session::steps", "use crate::source::Poll;\n"),
        ("session::stats", "pub struct Stats;\n"),
        (
            "source",
            "use crate::session::stats::Stats;\npub struct Poll;\n",
        ),
    ]);
    let graph = import_graph(&modules);
    assert!(cycles(&graph).is_empty());
    assert_eq!(
        cycles(&top_level(&graph)),
        vec![vec![
            "session".to_string(),
            "source".to_string(),
            "session".to_string()
        ]]
    );
}

#[test]
fn no_crate_has_a_module_cycle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut checked = 0;
    let mut cycles_found = Vec::new();
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
        let groups = cycle_groups(&graph)
            .into_iter()
            .map(|group| (name.clone(), group))
            .chain(
                cycle_groups(&top_level(&graph))
                    .into_iter()
                    .map(|group| (format!("{name} (top-level modules)"), group)),
            );
        for (label, (members, path)) in groups {
            cycles_found.push(format!(
                "{label}: {} (all {} modules of the cycle: {})",
                path.join(" -> "),
                members.len(),
                members.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        checked += 1;
    }
    assert!(
        checked >= 7,
        "expected the seven simsync crates (relay included), found {checked}"
    );
    assert!(cycles_found.is_empty(), "module cycles: {cycles_found:#?}");
}

/// The deterministic session reaches its features only through the hook seam: no module of
/// `session` imports the desync dumps, the replays, the prediction check or late join (the
/// plugin installs them as hooks or runs them around the update; the steps call the hook
/// list), the input path knows a replay only as recorded inputs and a snapshot transfer only as
/// the pure data of `snapshot/transfer.rs`.
#[test]
fn the_session_steps_name_no_feature() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/simsync_deterministic/src");
    let modules = load_crate(&src);
    let graph = import_graph(&modules);
    let features = ["dump", "replay", "prediction_check", "late_join"];
    let mut named = Vec::new();
    for (module, imports) in &graph {
        let top = module.split("::").next().unwrap_or_default();
        if !matches!(top, "session" | "source" | "hooks" | "worlds") {
            continue;
        }
        for import in imports {
            let target = import.split("::").next().unwrap_or_default();
            if features.contains(&target) {
                named.push(format!("{module} -> {import}"));
            }
        }
    }
    assert!(
        graph.keys().any(|m| m == "session::steps"),
        "the session's steps were read"
    );
    assert!(named.is_empty(), "{named:#?}");
}
