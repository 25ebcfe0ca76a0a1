//! A checkpoint header as the file's integrity record: what it says must be something a run
//! writes, and its lists must name every tensor of the file exactly once. A header edited
//! consistently (its checksum recomputed) that breaks either is refused, naming the file and
//! the entry.

use std::collections::BTreeSet;
use std::fmt::Display;

use anyhow::{bail, ensure};

use super::header::CheckpointHeader;
use super::{callback_tensor, is_reserved, section_tensor, state_tensor};

/// The largest step, epoch or batch count a header may hold: 2^53, beyond what any run
/// reaches (a million steps a second for 285 years) and where a count read as a float
/// (the `epoch` metric) stops being exact.
pub(super) const MAX_COUNT: u64 = 1 << 53;

/// The most processes a header may say its run had.
pub(super) const MAX_WORLD: u64 = 1 << 24;

/// What ends each refusal: the header is the file's record of itself.
const EDITED: &str = "an edited or damaged header";

/// Refuses a header no run writes: counters beyond [`MAX_COUNT`], a world beyond
/// [`MAX_WORLD`], a learning rate that is not a number, an `ember_version` that is not a
/// version, or lists that name one tensor twice. Returns the names of the tensors it lists.
pub(super) fn check_header(
    header: &CheckpointHeader,
    shown: &impl Display,
) -> anyhow::Result<BTreeSet<String>> {
    for (name, value) in [
        ("epoch", header.epoch),
        ("global_step", header.global_step),
        ("batches_done", header.batches_done),
    ] {
        ensure!(
            value <= MAX_COUNT,
            "{shown}: its header says {name} {value}, beyond what any run reaches (at most 2^53): {EDITED}"
        );
    }
    ensure!(
        header.world_size <= MAX_WORLD,
        "{shown}: its header says world_size {}, more processes than any run has (at most {MAX_WORLD}): {EDITED}",
        header.world_size
    );
    ensure!(
        header.learning_rate.is_finite(),
        "{shown}: its header says learning_rate {}, which no optimizer step takes: {EDITED}",
        header.learning_rate
    );
    ensure!(
        is_version(&header.ember_version),
        "{shown}: its header's ember_version `{}` is not a version (MAJOR.MINOR.PATCH): {EDITED}",
        header.ember_version
    );
    listed_tensors(header, shown)
}

/// The names of the file's tensors the header lists (weights under their paths, the rest under
/// their prefixes); an entry naming a tensor another entry names already is an error.
fn listed_tensors(
    header: &CheckpointHeader,
    shown: &impl Display,
) -> anyhow::Result<BTreeSet<String>> {
    if let Some((name, ..)) = header.weights.iter().find(|(name, ..)| is_reserved(name)) {
        bail!(
            "{shown}: its header lists weight `{name}` under a name ember keeps for its own tensors: {EDITED}"
        );
    }
    let weights = (header.weights.iter()).map(|(name, ..)| ("weight", name.clone()));
    let state =
        (header.optimizer_state.iter()).map(|(name, _)| ("optimizer state", state_tensor(name)));
    let callbacks = (header.callback_tensors.iter())
        .map(|(key, name, _)| ("callback tensor", callback_tensor(key, name)));
    let sections = (header.sections.iter()).map(|(name, ..)| ("section", section_tensor(name)));
    let mut listed = BTreeSet::new();
    for (what, tensor) in weights.chain(state).chain(callbacks).chain(sections) {
        if !listed.insert(tensor.clone()) {
            bail!("{shown}: its header lists {what} `{tensor}` twice: {EDITED}");
        }
    }
    Ok(listed)
}

/// Refuses a file holding a tensor its header does not list.
pub(super) fn check_all_listed<'a>(
    listed: &BTreeSet<String>,
    in_file: impl IntoIterator<Item = &'a str>,
    shown: &impl Display,
) -> anyhow::Result<()> {
    for tensor in in_file {
        ensure!(
            listed.contains(tensor),
            "{shown} holds tensor `{tensor}` that its header does not list: {EDITED}"
        );
    }
    Ok(())
}

/// Whether `text` is a version as Cargo writes one: `MAJOR.MINOR.PATCH`, then optionally a
/// `-pre-release` or `+build` part.
fn is_version(text: &str) -> bool {
    let core = text.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && (parts.iter()).all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::is_version;

    #[test]
    fn versions_are_cargos() {
        for good in ["0.1.0", "12.0.3", "1.2.3-rc.1", "1.2.3+abc"] {
            assert!(is_version(good), "{good}");
        }
        for bad in ["", "1.2", "1.2.3.4", "v1.2.3", "1..3", "latest", "1.2.x"] {
            assert!(!is_version(bad), "{bad}");
        }
    }
}
