//! What a segment of a known structure needs to run without being lowered again: its
//! compiled program, and which of the segment's tensors and scalars to pass it, named by the
//! segment's [`Signature`].

use std::collections::HashMap;
use std::sync::Arc;

use burn_backend::DType;
use burn_ir::{ScalarIr, TensorId};

use super::segment::Built;
use super::signature::Signature;
use crate::hlo::Emitted;
use crate::pjrt::Executable;

/// A lowered segment, ready to run again on a segment of the same signature.
pub struct Template {
    /// The compiled program.
    pub exe: Arc<Executable>,
    /// The program's tensor parameters, as numbers of the signature.
    inputs: Vec<usize>,
    /// The scalar parameters: per dtype, the indices into the signature's scalars.
    scalars: Vec<(DType, Vec<usize>)>,
    /// Scalars written into the program rather than passed (booleans): their indices and the
    /// values it was built with. A segment with other values needs another program.
    embedded: Vec<(usize, ScalarIr)>,
    /// What the program returns, and what dies in it, as numbers of the signature.
    outputs: Vec<usize>,
    freed: Vec<usize>,
}

/// One segment's side of its program: the tensors and scalar values to pass, the tensors it
/// returns, the tensors that die in it.
pub struct Bound {
    /// The tensor arguments, in parameter order.
    pub inputs: Vec<TensorId>,
    /// The scalar arguments: one vector per dtype, after the tensors.
    pub scalars: Vec<(DType, Vec<ScalarIr>)>,
    /// The tensors the program returns, in order.
    pub outputs: Vec<TensorId>,
    /// Tensors made before the segment that die in it.
    pub freed: Vec<TensorId>,
}

impl Bound {
    /// What a freshly lowered segment passes and keeps.
    pub fn of(built: &Built) -> Bound {
        let (inputs, scalars) = match &built.program {
            Some(program) => (
                program.inputs.clone(),
                program
                    .scalars
                    .by_dtype
                    .iter()
                    .map(|(dtype, lifted)| (*dtype, lifted.iter().map(|l| l.value).collect()))
                    .collect(),
            ),
            None => (Vec::new(), Vec::new()),
        };
        Bound {
            inputs,
            scalars,
            outputs: built.outputs.clone(),
            freed: built.freed.clone(),
        }
    }
}

impl Template {
    /// The template of a segment just lowered (`built`, whose program is `program`), or `None`
    /// where one of its lifted scalars cannot be traced back to the ops.
    pub fn new(
        sig: &Signature,
        built: &Built,
        program: &Emitted,
        exe: Arc<Executable>,
    ) -> Option<Template> {
        let numbers: HashMap<TensorId, usize> =
            sig.ids.iter().enumerate().map(|(n, id)| (*id, n)).collect();
        let number = |ids: &[TensorId]| -> Option<Vec<usize>> {
            ids.iter().map(|id| numbers.get(id).copied()).collect()
        };
        let mut lifted = vec![false; sig.scalars.len()];
        let mut scalars = Vec::with_capacity(program.scalars.by_dtype.len());
        for (dtype, values) in &program.scalars.by_dtype {
            let mut indices = Vec::with_capacity(values.len());
            for value in values {
                let index = sig.scalar_at(value.origin)?;
                lifted[index] = true;
                indices.push(index);
            }
            scalars.push((*dtype, indices));
        }
        let embedded = sig
            .scalars
            .iter()
            .enumerate()
            .filter(|(i, _)| !lifted[*i])
            .map(|(i, (value, _))| (i, *value))
            .collect();
        Some(Template {
            exe,
            inputs: number(&program.inputs)?,
            scalars,
            embedded,
            outputs: number(&built.outputs)?,
            freed: number(&built.freed)?,
        })
    }

    /// This template's program applied to the segment `sig` (of this template's structure),
    /// or `None` where a value written into the program differs.
    pub fn bind(&self, sig: &Signature) -> Option<Bound> {
        let same =
            |(i, value): &(usize, ScalarIr)| scalar_bits(&sig.scalars[*i].0) == scalar_bits(value);
        if !self.embedded.iter().all(same) {
            return None;
        }
        let ids = |numbers: &[usize]| numbers.iter().map(|n| sig.ids[*n]).collect();
        Some(Bound {
            inputs: ids(&self.inputs),
            scalars: self
                .scalars
                .iter()
                .map(|(dtype, indices)| {
                    (*dtype, indices.iter().map(|i| sig.scalars[*i].0).collect())
                })
                .collect(),
            outputs: ids(&self.outputs),
            freed: ids(&self.freed),
        })
    }
}

/// A scalar's variant and bits, so that NaN equals NaN and -0.0 differs from 0.0.
fn scalar_bits(value: &ScalarIr) -> (u8, u64) {
    match value {
        ScalarIr::Float(v) => (0, v.to_bits()),
        ScalarIr::Int(v) => (1, *v as u64),
        ScalarIr::UInt(v) => (2, *v),
        ScalarIr::Bool(v) => (3, u64::from(*v)),
    }
}
