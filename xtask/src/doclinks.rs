//! The paths README.md and docs/ name — markdown links, and repository paths such as
//! `crates/core/src/cli/mod.rs` or `docs/xla.md` in the text — exist, so a renamed file or a
//! moved test is caught by `cargo xtask lint` rather than by a reader.

use std::path::Path;

/// The top-level folders a path in the text starts with.
const ROOTS: [&str; 7] = [
    "crates/",
    "examples/",
    "tests/",
    "scripts/",
    "xtask/",
    "docs/",
    "vendor/",
];

/// The repository paths `line` names: markdown link targets (relative to `dir`, the file's
/// folder) and words starting with one of [`ROOTS`] (relative to the repository); globs and
/// placeholders (`*`, `<`, `{`) are left out.
fn named_paths(line: &str, dir: &Path) -> Vec<std::path::PathBuf> {
    let mut paths = Vec::new();
    for (at, _) in line.match_indices("](") {
        let rest = &line[at + 2..];
        let target = rest.split(')').next().unwrap_or_default();
        let target = target.split('#').next().unwrap_or_default();
        if !target.is_empty() && !target.contains("://") {
            paths.push(dir.join(target));
        }
    }
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut start = 0;
    while start < line.len() {
        let rest = &line[start..];
        let Some(offset) = ROOTS.iter().filter_map(|r| rest.find(r)).min() else {
            break;
        };
        let at = start + offset;
        let before = line[..at].chars().next_back();
        let end = line[at..]
            .find(|c: char| !is_path_char(c))
            .map_or(line.len(), |e| at + e);
        let next = line[end..].chars().next();
        let word = line[at..end].trim_end_matches(['.', ',', ':', ';']);
        let standalone = before.is_none_or(|c| !is_path_char(c));
        if standalone && !matches!(next, Some('*' | '<' | '{')) {
            paths.push(word.into());
        }
        start = end.max(at + 1);
    }
    paths
}

/// The manual: README.md and docs/*.md, sorted.
pub(crate) fn manual(root: &Path) -> Vec<std::path::PathBuf> {
    let mut files = vec![root.join("README.md")];
    let docs = std::fs::read_dir(root.join("docs"))
        .into_iter()
        .flatten()
        .flatten();
    files.extend(
        docs.map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    files.sort();
    files
}

/// Names every path README.md or docs/*.md mentions that does not exist; true when all do.
pub(crate) fn check(root: &Path) -> bool {
    let mut clean = true;
    for file in manual(root) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let dir = file.parent().unwrap_or(root);
        for (number, line) in text.lines().enumerate() {
            for path in named_paths(line, dir) {
                let resolved = if path.is_absolute() {
                    path.clone()
                } else {
                    root.join(&path)
                };
                if !resolved.exists() {
                    let shown = file.strip_prefix(root).unwrap_or(&file).display();
                    let missing = path.strip_prefix(root).unwrap_or(&path).display();
                    eprintln!(
                        "doclinks: {shown}:{}: `{missing}` does not exist",
                        number + 1
                    );
                    clean = false;
                }
            }
        }
    }
    clean
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_repository_paths_are_read_and_globs_left_out() {
        let dir = Path::new("/repo/docs");
        let line = "see [the CLI](cli.md#flags), crates/core/src/cli/mod.rs, `docs/xla.md`: \
                    examples/conv/tests/resume*.rs, <https://x.org/docs/a>, my/crates/x";
        let found: Vec<String> = named_paths(line, dir)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            found,
            [
                "/repo/docs/cli.md",
                "crates/core/src/cli/mod.rs",
                "docs/xla.md"
            ]
        );
    }

    #[test]
    fn every_path_the_docs_name_exists() {
        assert!(check(&crate::root()));
    }
}
