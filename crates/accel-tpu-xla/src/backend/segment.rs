//! A recorded segment of ops turned into one program: which tensors it reads, which it leaves
//! alive, which die in it.

use std::collections::HashSet;

use burn_ir::{OperationIr, TensorId, TensorStatus};

use crate::hlo::{Emitted, Function, Unsupported, lower::lower};

/// A segment ready to run.
pub struct Built {
    /// The program and its parameters; `None` when the segment only frees tensors.
    pub program: Option<Emitted>,
    /// The tensors the program returns, in order: those made here and still referenced.
    pub outputs: Vec<TensorId>,
    /// Tensors made before this segment whose last use (or drop) is in it: freed after it runs.
    pub freed: Vec<TensorId>,
}

/// Lowers `ops` into one function. A tensor stays alive unless an op consumed it as its last
/// user (`TensorStatus::ReadWrite`) or a `Drop` op names it.
pub fn build(ops: &[OperationIr]) -> Result<Built, Unsupported> {
    let mut f = Function::new();
    let mut produced = Vec::new();
    let mut made = HashSet::new();
    let mut dead = HashSet::new();
    let mut dead_order = Vec::new();
    let mut computes = false;
    for op in ops {
        match op {
            OperationIr::Drop(t) => {
                if dead.insert(t.id) {
                    dead_order.push(t.id);
                }
                continue;
            }
            OperationIr::Init(_) => continue,
            _ => {}
        }
        lower(&mut f, op)?;
        computes = true;
        for t in op.inputs() {
            if t.status == TensorStatus::ReadWrite && dead.insert(t.id) {
                dead_order.push(t.id);
            }
        }
        for t in op.outputs() {
            if made.insert(t.id) {
                produced.push(t.id);
            }
        }
    }
    let outputs: Vec<TensorId> = produced
        .into_iter()
        .filter(|id| !dead.contains(id))
        .collect();
    let freed = dead_order
        .into_iter()
        .filter(|id| !made.contains(id))
        .collect();
    let program = if computes && !outputs.is_empty() {
        Some(f.finish(&outputs)?)
    } else {
        None
    };
    Ok(Built {
        program,
        outputs,
        freed,
    })
}
