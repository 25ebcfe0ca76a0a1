//! Every Rust code block of README.md and docs/ is compiled: either its page is a doc test of
//! some crate (`#[doc = include_str!(".../docs/PAGE.md")]`, as docs/plugins.md is), or the block
//! is code that a crate, an example or a test of this repository holds (compared line by line,
//! indentation and blank lines aside). `cargo xtask lint` runs this check.

use std::path::{Path, PathBuf};

/// `text`'s lines trimmed, blank ones left out.
fn normalized(text: &str) -> String {
    let lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    lines.collect::<Vec<_>>().join("\n")
}

/// The Rust blocks of a markdown text, with the line each starts on (1-based).
fn rust_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (number, line) in markdown.lines().enumerate() {
        match (&mut open, line.trim_start()) {
            (None, "```rust") => open = Some((number + 2, String::new())),
            (Some(_), fence) if fence.starts_with("```") => blocks.extend(open.take()),
            (Some((_, block)), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The `.rs` files under crates/, examples/ and tests/ (the code the workspace compiles).
fn sources(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack: Vec<PathBuf> = ["crates", "examples", "tests"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() && !path.ends_with("target") {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Whether `source` makes the page `name` (`plugins.md`) a doc test.
fn doc_tests(source: &str, name: &str) -> bool {
    source.lines().any(|line| {
        let line = line.trim();
        line.starts_with("#[doc = include_str!(") && line.contains(&format!("docs/{name}\""))
    })
}

/// Names every Rust block of the manual that nothing compiles; true when there is none.
pub(crate) fn check(root: &Path) -> bool {
    let sources: Vec<String> = (sources(root).iter())
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect();
    let compiled = sources
        .iter()
        .map(|s| normalized(s))
        .collect::<Vec<_>>()
        .join("\n");
    let mut clean = true;
    for page in crate::doclinks::manual(root) {
        let name = page
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if sources.iter().any(|source| doc_tests(source, name)) {
            continue;
        }
        let text = std::fs::read_to_string(&page).unwrap_or_default();
        for (line, block) in rust_blocks(&text) {
            if !compiled.contains(&normalized(&block)) {
                let shown = page.strip_prefix(root).unwrap_or(&page).display();
                eprintln!(
                    "snippets: {shown}:{line}: this Rust block is in no compiled file: quote \
                     code a crate, example or test holds, or add it to one"
                );
                clean = false;
            }
        }
    }
    clean
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_read_with_their_lines_and_compared_without_indentation() {
        let page = "text\n```rust\n    let a = 1;\n\n    let b = 2;\n```\n```toml\nx = 1\n```\n";
        let blocks = rust_blocks(page);
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].0, 3);
        let source = "fn f() {\n        let a = 1;\n        let b = 2;\n}";
        assert!(normalized(source).contains(&normalized(&blocks[0].1)));
        assert!(!normalized("let a = 1;\nlet c = 3;").contains(&normalized(&blocks[0].1)));
    }

    #[test]
    fn a_page_included_as_doc_test_is_recognised() {
        let source = "#[cfg(doctest)]\n#[doc = include_str!(\"../../../docs/plugins.md\")]\n";
        assert!(doc_tests(source, "plugins.md"));
        assert!(!doc_tests(source, "trainer.md"));
    }
}
