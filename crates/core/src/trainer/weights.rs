//! A model's parameters by module path (`mlp.hidden.0.weight`), as checkpoints store them,
//! and loading them back into a model with everything that does not fit named.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::ensure;
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, DType, Int, Tensor, TensorData};

/// A parameter as a checkpoint stores it: module path, burn's id and its data.
pub type Weight = (String, ParamId, TensorData);

/// Every float and int parameter of `model` by module path, in its own dtype. A bool
/// parameter is refused: checkpoints hold float and int tensors.
pub fn weights_of<B: Backend, M: Module<B>>(model: &M) -> anyhow::Result<Vec<Weight>> {
    crate::plugins::weights::sync_running_states::<B, M>(model);
    let mut collect = CollectWeights::default();
    model.visit(&mut collect);
    ensure!(
        collect.bool_params.is_empty(),
        "cannot checkpoint bool parameters ({}): checkpoints hold float and int parameters",
        collect.bool_params.join(", ")
    );
    Ok(collect.weights)
}

/// burn's id of every float parameter of `model` by module path. Loading a checkpoint gives
/// parameters its ids but leaves running states (batch-norm statistics) theirs, so a loaded
/// model's ids are read here, not from the checkpoint.
pub(crate) fn param_ids<B: Backend, M: Module<B>>(model: &M) -> BTreeMap<String, ParamId> {
    struct CollectIds(Vec<String>, BTreeMap<String, ParamId>);
    impl<B: Backend> ModuleVisitor<B> for CollectIds {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.0.push(name.to_owned());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.0.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.1.insert(self.0.join("."), param.id);
        }
    }
    let mut collect = CollectIds(Vec::new(), BTreeMap::new());
    model.visit(&mut collect);
    collect.1
}

/// Initialises every lazily created parameter of `model` in place, in visit order.
///
/// burn creates parameters lazily: each draws its random values when it is first read, and a
/// clone of a model not yet read initialises its own copy. Left so, a model's initial weights
/// would depend on which code reads them first (under ddp, rank 0's model summary changed the
/// weights every rank trained from). Every entry point of the Trainer calls this first, so the
/// initial weights are the draws that follow the seed, whatever the run prints or writes. Code
/// that times a fit from its own clock (a benchmark) calls it first, so that the draws fall
/// outside the timing.
pub fn materialize<B: Backend, M: Module<B>>(model: &M) {
    model.visit(&mut Materialize);
}

/// Reads every parameter once (reading one initialises it).
struct Materialize;

impl<B: Backend> ModuleVisitor<B> for Materialize {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let _ = param.val();
    }

    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        let _ = param.val();
    }

    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
        let _ = param.val();
    }
}

/// Collects parameters with the path of module names that leads to them.
#[derive(Default)]
struct CollectWeights {
    path: Vec<String>,
    weights: Vec<Weight>,
    bool_params: Vec<String>,
}

impl<B: Backend> ModuleVisitor<B> for CollectWeights {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.push(name.to_owned());
    }

    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.weights
            .push((self.path.join("."), param.id, param.val().into_data()));
    }

    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        self.weights
            .push((self.path.join("."), param.id, param.val().into_data()));
    }

    fn visit_bool<const D: usize>(&mut self, _: &Param<Tensor<B, D, Bool>>) {
        self.bool_params.push(self.path.join("."));
    }
}

/// Replaces parameters with a checkpoint's weights (and ids), recording what does not fit.
struct LoadWeights<'a> {
    path: Vec<String>,
    weights: &'a BTreeMap<String, TensorData>,
    ids: HashMap<&'a str, u64>,
    loaded: BTreeSet<String>,
    errors: Vec<String>,
}

impl LoadWeights<'_> {
    /// The checkpoint's data for the parameter at the current path, in the parameter's dtype
    /// (float types convert to each other; anything else must match), and its stored id.
    fn take(&mut self, shape: &[usize], dtype: DType) -> Option<(TensorData, Option<ParamId>)> {
        let name = self.path.join(".");
        let Some(data) = self.weights.get(&name) else {
            self.errors.push(format!("no weight for {name}"));
            return None;
        };
        if data.shape.to_vec() != shape {
            self.errors.push(format!(
                "{name} has shape {:?}, the model's parameter {shape:?}",
                data.shape.to_vec()
            ));
            return None;
        }
        let data = match data.dtype {
            d if d == dtype => data.clone(),
            d if d.is_float() && dtype.is_float() => data.clone().convert_dtype(dtype),
            d => {
                self.errors
                    .push(format!("{name} is {d:?}, the model's parameter {dtype:?}"));
                return None;
            }
        };
        let id = self.ids.get(name.as_str()).copied().map(ParamId::from);
        self.loaded.insert(name);
        Some((data, id))
    }
}

impl<B: Backend> ModuleMapper<B> for LoadWeights<'_> {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.push(name.to_owned());
    }

    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let current = param.val();
        let Some((data, id)) = self.take(&current.shape().to_vec(), current.dtype()) else {
            return param;
        };
        let mut param = param.map(|t| {
            let (require_grad, dtype) = (t.is_require_grad(), t.dtype());
            Tensor::from_data(data, (&t.device(), dtype)).set_require_grad(require_grad)
        });
        param.id = id.unwrap_or(param.id);
        param
    }

    fn map_int<const D: usize>(
        &mut self,
        param: Param<Tensor<B, D, Int>>,
    ) -> Param<Tensor<B, D, Int>> {
        let current = param.val();
        let Some((data, id)) = self.take(&current.shape().to_vec(), current.dtype()) else {
            return param;
        };
        let mut param = param.map(|t| Tensor::from_data(data, (&t.device(), t.dtype())));
        param.id = id.unwrap_or(param.id);
        param
    }
}

/// `model` with its parameters replaced by `weights` (and their stored `ids`), and what did
/// not fit: a parameter with no weight or another shape or dtype, a weight with no parameter.
pub(super) fn load_into<B: Backend, M: Module<B>>(
    model: M,
    weights: &BTreeMap<String, TensorData>,
    ids: HashMap<&str, u64>,
) -> (M, Vec<String>) {
    let mut load = LoadWeights {
        path: Vec::new(),
        weights,
        ids,
        loaded: BTreeSet::new(),
        errors: Vec::new(),
    };
    let model = model.map(&mut load);
    let unused: Vec<&str> = weights
        .keys()
        .filter(|name| !load.loaded.contains(*name))
        .map(String::as_str)
        .collect();
    if !unused.is_empty() && load.errors.is_empty() {
        load.errors.push(format!(
            "the model has no parameter for {}",
            unused.join(", ")
        ));
    }
    (model, load.errors)
}
