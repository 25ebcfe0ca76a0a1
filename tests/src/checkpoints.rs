//! Reading the checkpoints a run wrote, to compare runs: the newest file, and every tensor by
//! name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::tensor::TensorData;
use ember::checkpoint::Checkpoint;

/// The newest file in `dir` (by modification time).
pub fn newest(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .unwrap_or_else(|| panic!("{} is empty", dir.display()))
}

/// Every tensor of the checkpoint at `path` by name: the weights, then the optimizer's state
/// named by its parameter's path (ids differ between runs) and field.
pub fn tensors(path: &Path) -> BTreeMap<String, TensorData> {
    let checkpoint = Checkpoint::decode(&std::fs::read(path).unwrap(), path).unwrap();
    let paths: BTreeMap<String, String> = (checkpoint.header.weights.iter())
        .map(|(name, _, id)| (id.to_string(), name.clone()))
        .collect();
    let state = checkpoint.optimizer_state.into_iter().map(|(name, data)| {
        let (id, field) = name.split_once('.').unwrap();
        (format!("{}/{field}", paths[id]), data)
    });
    checkpoint.weights.into_iter().chain(state).collect()
}
