//! Docs stay true to compiled code: the Rust snippets of a section of a doc must be found,
//! line for line (indentation and blank lines aside), in a source file that compiles.

/// Lines trimmed, blank lines dropped: snippets start at column 0 where the source indents.
fn normalized(text: &str) -> String {
    let lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    lines.collect::<Vec<_>>().join("\n")
}

/// The text under `heading` (`### Fine-tuning`) up to the next heading of its level or above,
/// headings inside code blocks (YAML comments) aside.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = doc
        .find(&format!("{heading}\n"))
        .unwrap_or_else(|| panic!("the doc has no section `{heading}`"))
        + heading.len();
    let rest = &doc[start..];
    let (mut at, mut in_code) = (0, false);
    for line in rest.split_inclusive('\n') {
        in_code ^= line.starts_with("```");
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !in_code && (1..=level).contains(&hashes) && line[hashes..].starts_with(' ') {
            break;
        }
        at += line.len();
    }
    &rest[..at]
}

/// Asserts that the section of `doc` under the heading `heading` (up to the next heading of its
/// level or above) has `count` Rust snippets and that each is in `source`.
pub fn assert_snippets_in(doc: &str, heading: &str, source: &str, count: usize) {
    let section = section(doc, heading);
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
