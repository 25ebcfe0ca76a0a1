//! A recorded segment of ops turned into one program: which tensors it reads, which it leaves
//! alive, which die in it, and which cannot be computed and why.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use burn_ir::{OperationIr, TensorId, TensorStatus};

use super::donation;
use crate::hlo::{Emitted, Function, lower::lower};

/// Why a tensor holds no value: the error of the op that should have made it.
pub type Failure = Arc<str>;

/// A segment ready to run.
pub struct Built {
    /// The program and its parameters; `None` when the segment only frees tensors (or when
    /// every op in it failed).
    pub program: Option<Emitted>,
    /// The tensors the program returns, in order: those made here and still referenced.
    pub outputs: Vec<TensorId>,
    /// Tensors made before this segment whose last use (or drop) is in it: freed after it runs.
    pub freed: Vec<TensorId>,
    /// Tensors the segment cannot make, with the error of the op at the root of it: an op
    /// that is not lowered, and every op that reads what such an op (or an earlier failed
    /// segment) should have made. The other ops of the segment still run.
    pub failed: Vec<(TensorId, Failure)>,
}

/// Lowers `ops` into `f`, an empty function (for one device, or partitioned over several). A
/// tensor stays alive unless an op consumed it as its last user (`TensorStatus::ReadWrite`)
/// or a `Drop` op names it. `earlier` holds the tensors that earlier segments failed to make.
pub fn build(ops: &[OperationIr], earlier: &HashMap<TensorId, Failure>, mut f: Function) -> Built {
    let mut produced = Vec::new();
    let mut made = HashSet::new();
    let mut dead = HashSet::new();
    let mut dead_order = Vec::new();
    let mut failed: HashMap<TensorId, Failure> = HashMap::new();
    let mut failed_order = Vec::new();
    for op in ops {
        if let OperationIr::Drop(t) = op {
            if dead.insert(t.id) {
                dead_order.push(t.id);
            }
            continue;
        }
        let poisoned = op
            .inputs()
            .find_map(|t| failed.get(&t.id).or_else(|| earlier.get(&t.id)).cloned());
        let result = match poisoned {
            Some(cause) => Err(cause),
            None => lower(&mut f, op).map_err(|e| Failure::from(e.to_string())),
        };
        for t in op.inputs() {
            if t.status == TensorStatus::ReadWrite && dead.insert(t.id) {
                dead_order.push(t.id);
            }
        }
        for t in op.outputs() {
            match &result {
                Ok(()) => {
                    if made.insert(t.id) {
                        produced.push(t.id);
                    }
                }
                Err(cause) => {
                    if failed.insert(t.id, cause.clone()).is_none() {
                        failed_order.push(t.id);
                    }
                }
            }
        }
    }
    let mut outputs: Vec<TensorId> = produced
        .into_iter()
        .filter(|id| !dead.contains(id))
        .collect();
    let freed: Vec<TensorId> = dead_order
        .into_iter()
        .filter(|id| !made.contains(id) && !failed.contains_key(id))
        .collect();
    let mut failed: Vec<(TensorId, Failure)> = failed_order
        .into_iter()
        .filter(|id| !dead.contains(id))
        .map(|id| (id, failed[&id].clone()))
        .collect();
    let program = if outputs.is_empty() {
        None
    } else {
        // What dies here lends its buffer to the output it is updated into: parameters and
        // optimizer states updated in place.
        let donors: HashSet<TensorId> = freed.iter().copied().collect();
        let lent = donation::updates(ops, &outputs, &donors);
        match f.finish(&outputs, &lent) {
            Ok(program) => Some(program),
            Err(e) => {
                let cause = Failure::from(e.to_string());
                failed.extend(outputs.drain(..).map(|id| (id, cause.clone())));
                None
            }
        }
    };
    Built {
        program,
        outputs,
        freed,
        failed,
    }
}
