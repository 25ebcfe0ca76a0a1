//! Docs stay true to compiled code: the Rust snippets of a section of a doc must be found,
//! line for line (indentation and blank lines aside), in a source file that compiles.

/// Lines trimmed, blank lines dropped: snippets start at column 0 where the source indents.
fn normalized(text: &str) -> String {
    let lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    lines.collect::<Vec<_>>().join("\n")
}

/// Asserts that the section of `doc` under the heading `heading` (up to the next `## `) has
/// `count` Rust snippets and that each is in `source`.
pub fn assert_snippets_in(doc: &str, heading: &str, source: &str, count: usize) {
    let section = doc
        .split(heading)
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_else(|| panic!("the doc has no section `{heading}`"));
    let source = normalized(source);
    let snippets: Vec<&str> = (section.split("```rust\n").skip(1))
        .map(|rest| rest.split("```").next().unwrap_or_default())
        .collect();
    assert_eq!(snippets.len(), count, "snippets under `{heading}`");
    for snippet in snippets {
        assert!(
            source.contains(&normalized(snippet)),
            "this snippet under `{heading}` is not in the source:\n{snippet}"
        );
    }
}
