//! The layering rules `cargo xtask lint` checks beside fmt and clippy (see
//! `docs/architecture.md`, "Invariants"):
//!
//! - the modules of ember-plan and ember-core form no cycle (a module's uses of `crate::...`,
//!   `super::...` and `self::...` paths, comments left out; a child module may use its
//!   ancestors);
//! - nor do their top-level parts (folders such as `plugins/` and `trainer/`, and the files at
//!   the crate root such as `registry.rs`): a part that uses another is not used by it, through
//!   any of their files;
//! - no source file of either crate is longer than [`MAX_LINES`];
//! - ember-plan depends on no burn crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The most lines a source file of ember-plan or ember-core may have.
pub const MAX_LINES: usize = 500;

/// The crates whose module graphs must be acyclic and whose files must stay short.
const CRATES: [&str; 2] = ["crates/plan/src", "crates/core/src"];

/// Checks every rule; prints each violation and returns whether there was none.
pub fn check(root: &Path) -> bool {
    let mut ok = true;
    for dir in CRATES {
        let modules = read_modules(&root.join(dir));
        for (name, source) in &modules {
            let lines = source.lines().count();
            if lines > MAX_LINES {
                eprintln!("layering: {dir}/{name}: {lines} lines (at most {MAX_LINES})");
                ok = false;
            }
        }
        let graph = graph(&modules);
        let module_cycles = cycles(&graph);
        for cycle in &module_cycles {
            eprintln!("layering: module cycle in {dir}: {}", cycle.join(" -> "));
        }
        let folder_cycles = cycles(&folders(&graph));
        for cycle in &folder_cycles {
            eprintln!(
                "layering: cycle between top-level parts of {dir}: {}",
                cycle.join(" -> ")
            );
        }
        ok &= module_cycles.is_empty() && folder_cycles.is_empty();
    }
    ok & plan_has_no_burn(root)
}

fn plan_has_no_burn(root: &Path) -> bool {
    let out = Command::new("cargo")
        .args([
            "tree",
            "-p",
            "ember-plan",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(root)
        .output();
    match out {
        Ok(out) if out.status.success() => {
            let tree = String::from_utf8_lossy(&out.stdout);
            let burn: BTreeSet<&str> = tree
                .lines()
                .filter(|l| l.starts_with("burn"))
                .filter_map(|l| l.split_whitespace().next())
                .collect();
            if !burn.is_empty() {
                eprintln!("layering: ember-plan depends on burn crates: {burn:?}");
            }
            burn.is_empty()
        }
        Ok(out) => {
            eprintln!(
                "layering: cargo tree failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            false
        }
        Err(e) => {
            eprintln!("layering: cannot run cargo tree: {e}");
            false
        }
    }
}

/// Every `.rs` file under `src`, keyed by module path (`trainer::data`; the crate root is
/// `""`), with its text.
fn read_modules(src: &Path) -> BTreeMap<String, String> {
    let mut files = Vec::new();
    collect(src, &mut files);
    files
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(src).ok()?.with_extension("");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).ok()?;
            Some((parts.join("::"), text))
        })
        .collect()
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// Which modules each module uses (edges to its own ancestors left out).
fn graph(modules: &BTreeMap<String, String>) -> BTreeMap<&str, BTreeSet<&str>> {
    modules
        .iter()
        .map(|(name, source)| {
            let used = paths(&code_of(source), name)
                .into_iter()
                .filter_map(|path| owner(modules, &path))
                .filter(|target| target != name && !target.is_empty() && !is_ancestor(target, name))
                .collect();
            (name.as_str(), used)
        })
        .collect()
}

/// The module graph between top-level parts: an edge where a module inside one part (a folder,
/// or a file at the crate root) uses a module inside another.
fn folders<'a>(
    graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
) -> BTreeMap<&'a str, BTreeSet<&'a str>> {
    let part = |module: &'a str| module.split("::").next().unwrap_or_default();
    let mut folded: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (&from, targets) in graph {
        for &to in targets {
            let (a, b) = (part(from), part(to));
            if a != b && !a.is_empty() {
                folded.entry(a).or_default().insert(b);
            }
        }
    }
    folded
}

fn is_ancestor(target: &str, module: &str) -> bool {
    module
        .strip_prefix(target)
        .is_some_and(|rest| rest.starts_with("::"))
}

/// The source without comments and without its `#[cfg(test)]` tests module.
fn code_of(source: &str) -> String {
    let source = source
        .find("#[cfg(test)]\nmod tests")
        .map_or(source, |i| &source[..i]);
    source
        .lines()
        .map(|line| line.find("//").map_or(line, |i| &line[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Absolute module paths (`trainer::data::Shard`) a module's code names, with `use` groups
/// (`use crate::a::{b, c::d}`) expanded.
fn paths(code: &str, module: &str) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(start) {
            let preceded_by_ident =
                i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
            if preceded_by_ident {
                continue;
            }
            let base: Vec<&str> = match start {
                "crate::" => Vec::new(),
                "super::" => parent(module),
                _ => module.split("::").filter(|p| !p.is_empty()).collect(),
            };
            expand(&code[i + start.len()..], &base, &mut found);
        }
    }
    found
}

fn parent(module: &str) -> Vec<&str> {
    let mut parts: Vec<&str> = module.split("::").filter(|p| !p.is_empty()).collect();
    parts.pop();
    parts
}

/// Reads one path (possibly ending in a `{...}` group) at the start of `rest`.
fn expand(rest: &str, base: &[&str], found: &mut Vec<String>) {
    let mut path: Vec<String> = base.iter().map(|s| (*s).to_owned()).collect();
    let mut rest = rest;
    loop {
        let ident: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if ident.is_empty() {
            break;
        }
        rest = &rest[ident.len()..];
        if ident == "super" {
            path.pop();
        } else {
            path.push(ident);
        }
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => break,
        }
    }
    if let Some(group) = rest.strip_prefix('{') {
        let inner = &group[..matching_brace(group)];
        let prefix: Vec<&str> = path.iter().map(String::as_str).collect();
        for item in split_top_level(inner) {
            expand(item.trim(), &prefix, found);
        }
    }
    found.push(path.join("::"));
}

/// Index of the `}` closing a group whose `{` was just consumed.
fn matching_brace(text: &str) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    text.len()
}

fn split_top_level(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
}

/// The longest module that `path` starts with.
fn owner<'a>(modules: &'a BTreeMap<String, String>, path: &str) -> Option<&'a str> {
    let parts: Vec<&str> = path.split("::").collect();
    (0..=parts.len()).rev().find_map(|n| {
        modules
            .get_key_value(&parts[..n].join("::"))
            .map(|(k, _)| k.as_str())
    })
}

/// Each strongly connected set of more than one module, as a path that closes on itself.
fn cycles<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    let mut found = Vec::new();
    let mut reported: BTreeSet<&str> = BTreeSet::new();
    for &start in graph.keys() {
        if reported.contains(start) {
            continue;
        }
        if let Some(cycle) = path_back(graph, start) {
            reported.extend(cycle.iter().copied());
            found.push(cycle);
        }
    }
    found
}

/// A shortest path from `start` back to itself, if there is one (breadth first).
fn path_back<'a>(
    graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
    start: &'a str,
) -> Option<Vec<&'a str>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &next in graph.get(node).into_iter().flatten() {
            if next == start {
                let mut cycle = vec![start];
                let mut at = node;
                while at != start {
                    cycle.insert(1, at);
                    at = came_from[at];
                }
                cycle.push(start);
                return Some(cycle);
            }
            if !came_from.contains_key(next) {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modules(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_cycle_through_a_use_group_is_found_and_comments_are_not_uses() {
        let m = modules(&[
            ("", "pub mod a; pub mod b; pub mod c;"),
            ("a", "use crate::{b::Thing, c};"),
            ("b", "// crate::a is only mentioned\nuse super::c::X;"),
            ("c", "fn f() { crate::a::g() }"),
        ]);
        let g = graph(&m);
        assert_eq!(g["a"], BTreeSet::from(["b", "c"]));
        assert_eq!(g["b"], BTreeSet::from(["c"]));
        assert_eq!(
            cycles(&g),
            vec![vec!["a", "c", "a"], vec!["b", "c", "a", "b"]]
        );
    }

    #[test]
    fn folders_that_use_each_other_are_a_cycle_though_their_files_are_not() {
        let m = modules(&[
            ("", "pub mod p; pub mod t;"),
            ("p", "pub mod a; pub mod b;"),
            ("p::a", "use crate::t::x::X;"),
            ("p::b", ""),
            ("t", "pub mod x; pub mod y;"),
            ("t::x", ""),
            ("t::y", "use crate::p::b::B;"),
        ]);
        let g = graph(&m);
        assert!(cycles(&g).is_empty());
        assert_eq!(cycles(&folders(&g)), vec![vec!["p", "t", "p"]]);
    }

    #[test]
    fn a_file_at_the_crate_root_is_a_part_of_its_own() {
        // `f` re-exported by `p`, which `f` uses: no module cycle, but two parts using each
        // other; a root file used one way only is fine.
        let m = modules(&[
            ("", "pub mod f; pub mod g; pub mod p;"),
            ("f", "use crate::p::b::B;"),
            ("g", "use crate::p::a::A;"),
            ("p", "pub mod a; pub mod b; pub use crate::f::F;"),
            ("p::a", ""),
            ("p::b", ""),
        ]);
        let g = graph(&m);
        assert!(cycles(&g).is_empty());
        assert_eq!(cycles(&folders(&g)), vec![vec!["f", "p", "f"]]);
    }

    #[test]
    fn children_may_use_their_parents() {
        let m = modules(&[
            ("", ""),
            ("t", "mod x; use self::x::Y;"),
            ("t::x", "use super::Z; use crate::t::W;"),
        ]);
        assert!(cycles(&graph(&m)).is_empty());
    }
}
