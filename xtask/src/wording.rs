//! The user-facing text — README.md, docs/ and the examples' own sources — speaks of ember,
//! not of how its work is organised: no issue numbers, acceptance-list numbers, planning files
//! or remarks on what hardware was lent. `cargo xtask lint` runs this check.

use std::path::{Path, PathBuf};

/// Phrases that belong to the work's organisation, lower-cased.
const ORGANISATIONAL: [&str; 5] = [
    "issue ",
    "acceptance ",
    "design.md",
    "lent to",
    "no gpu lent",
];

/// The phrase of [`ORGANISATIONAL`] that `line` holds, if any (`issue` and `acceptance` count
/// only before a number, as in "issue 31").
fn organisational(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    ORGANISATIONAL.into_iter().find(|phrase| {
        lower.match_indices(phrase).any(|(at, _)| {
            let numbered = phrase.ends_with(' ');
            let next = lower[at + phrase.len()..].chars().next();
            !numbered || next.is_some_and(|c| c.is_ascii_digit())
        })
    })
}

/// The files the check reads: README.md, docs/**/*.md, examples/*/src/**/*.rs.
fn user_facing(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut stack = vec![root.join("docs")];
    let examples = std::fs::read_dir(root.join("examples"))
        .into_iter()
        .flatten()
        .flatten();
    stack.extend(examples.map(|e| e.path().join("src")));
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            match path.extension().and_then(|e| e.to_str()) {
                _ if path.is_dir() => stack.push(path),
                Some("md" | "rs") => files.push(path),
                _ => {}
            }
        }
    }
    files.sort();
    files
}

/// Names every line of user-facing text with an organisational phrase; true when there is none.
pub(crate) fn check(root: &Path) -> bool {
    let mut clean = true;
    for file in user_facing(root) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (number, line) in text.lines().enumerate() {
            if let Some(phrase) = organisational(line) {
                let shown = file.strip_prefix(root).unwrap_or(&file).display();
                eprintln!(
                    "wording: {shown}:{}: `{}` is about how the work is organised, not about ember",
                    number + 1,
                    phrase.trim()
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
    fn numbered_issues_and_planning_words_are_found_and_ordinary_words_are_not() {
        assert_eq!(organisational("as issue 31 asked"), Some("issue "));
        assert_eq!(organisational("(ACCEPTANCE 27)"), Some("acceptance "));
        assert_eq!(organisational("see DESIGN.md"), Some("design.md"));
        assert_eq!(
            organisational("no GPU was lent to this work"),
            Some("lent to")
        );
        assert_eq!(organisational("a known issue with the driver"), None);
        assert_eq!(organisational("the acceptance suite"), None);
        assert_eq!(
            organisational("buffers lent only to their own updates"),
            None
        );
    }

    #[test]
    fn the_repository_speaks_of_ember() {
        assert!(check(&crate::root()));
    }
}
