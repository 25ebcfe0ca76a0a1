//! Helpers shared by the digits precision tests.

use std::path::Path;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor};
use ember::TrainerOptions;

/// Quiet options for a 3-epoch digits fit (seed 42) writing under `root`.
pub fn three_epochs(root: &Path) -> TrainerOptions {
    TrainerOptions {
        seed: Some(42),
        max_epochs: Some(3),
        enable_progress_bar: false,
        default_root_dir: root.to_owned(),
        ..TrainerOptions::default()
    }
}

/// The dtype of every float parameter.
struct Dtypes(Vec<DType>);

impl<B: Backend> ModuleVisitor<B> for Dtypes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(param.val().dtype());
    }
}

/// The dtype of each float parameter of `model`, in module order.
pub fn dtypes<B: Backend, M: Module<B>>(model: &M) -> Vec<DType> {
    let mut visitor = Dtypes(Vec::new());
    model.visit(&mut visitor);
    visitor.0
}
