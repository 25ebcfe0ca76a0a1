//! Whether the crates meant for users package (`cargo xtask lint`): each is a package cargo can
//! publish (every dependency has a version, no reserved file names, licence files inside), and
//! every other workspace member says `publish = false`.

use std::path::Path;

use crate::run;

/// The packages a program using ember depends on: ember, what it is built from, and the two
/// burn crates it carries patched under names of their own.
pub const PUBLISHED: [&str; 12] = [
    "ember",
    "ember-core",
    "ember-plan",
    "ember-derive",
    "ember-accel-cpu",
    "ember-accel-cuda",
    "ember-accel-wgpu",
    "ember-accel-tch",
    "ember-accel-tpu-xla",
    "ember-mpi",
    "ember-burn-flex",
    "ember-burn-autodiff",
];

/// The licence files each published package carries (the repository's, linked).
const LICENCES: [&str; 2] = ["LICENSE-MIT", "LICENSE-APACHE"];

/// A workspace member's package name and whether its manifest says `publish = false`.
fn member(manifest: &str) -> Option<(String, bool)> {
    let package = manifest.split("[package]").nth(1)?;
    let section = package.split("\n[").next()?;
    let name = section
        .lines()
        .find_map(|l| l.trim().strip_prefix("name = "))?
        .trim_matches('"')
        .to_string();
    let private = section.lines().any(|l| l.trim() == "publish = false");
    Some((name, private))
}

/// The workspace's member directories, from the root manifest's `members` list.
fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let list = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_default();
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Checks the members' `publish` settings and licence files, then runs `cargo package` (offline,
/// without the verifying build) over [`PUBLISHED`]; prints each problem.
pub fn check(root: &Path) -> bool {
    let mut ok = true;
    for dir in members(root) {
        let path = root.join(&dir);
        let manifest = std::fs::read_to_string(path.join("Cargo.toml")).unwrap_or_default();
        let Some((name, private)) = member(&manifest) else {
            eprintln!("xtask: packaging: no [package] name in {dir}/Cargo.toml");
            ok = false;
            continue;
        };
        let published = PUBLISHED.contains(&name.as_str());
        if published == private {
            let should = if published {
                "be published"
            } else {
                "say publish = false"
            };
            eprintln!("xtask: packaging: {name} ({dir}) should {should}");
            ok = false;
        }
        for licence in LICENCES.iter().filter(|_| published) {
            if !path.join(licence).is_file() {
                eprintln!("xtask: packaging: {dir} has no {licence}");
                ok = false;
            }
        }
    }
    let mut args = vec!["package", "--no-verify", "--offline", "--allow-dirty"];
    for package in PUBLISHED {
        args.extend(["-p", package]);
    }
    ok && run("cargo", &args, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_its_package_name_and_publish_setting() {
        let manifest = "[package]\nname = \"convnet\"\nversion = \"0.1.0\"\npublish = false\n\n\
                        [dependencies]\nname = \"not this\"\n";
        assert_eq!(member(manifest), Some(("convnet".into(), true)));
        let manifest = "[package]\nname = \"ember\"\n\n[features]\npublish = false\n";
        assert_eq!(member(manifest), Some(("ember".into(), false)));
    }

    #[test]
    fn every_workspace_member_is_read() {
        let root = crate::root();
        let members = members(&root);
        assert!(members.contains(&"crates/ember".to_string()), "{members:?}");
        assert!(
            members.contains(&"vendor/burn-flex".to_string()),
            "{members:?}"
        );
        for dir in members {
            let manifest = std::fs::read_to_string(root.join(&dir).join("Cargo.toml")).unwrap();
            assert!(member(&manifest).is_some(), "{dir}");
        }
    }
}
