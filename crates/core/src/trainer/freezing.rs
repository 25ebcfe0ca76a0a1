//! Freezing and unfreezing parts of a model by module path (`backbone`, `backbone.layers.0`),
//! as Lightning's `BaseFinetuning.freeze` / `make_trainable` do: a frozen parameter takes no
//! gradient, so no optimizer updates it. With `train_bn`, batch-norm layers inside a frozen
//! module stay trainable (Lightning's default). A path names module fields (and, last, a
//! parameter) as burn visits them: `Vec` items by index.

use std::collections::{BTreeMap, HashSet};

use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};

/// The parameters [`freeze`] froze, so that [`unfreeze`] makes exactly those trainable again
/// (burn visits a module's running statistics as float tensors that take no gradient, so
/// "everything under the path" would wake them too).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frozen {
    ids: HashSet<ParamId>,
}

impl Frozen {
    /// How many parameters were frozen.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether none was (everything under the path was frozen already).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// `model` with every float parameter under module `path` (`backbone`, `encoder.layers.0`;
/// `""`: the whole model) frozen, batch-norm layers left trainable when `train_bn`, and which
/// parameters that froze; an error names the top-level modules when nothing is under `path`.
pub fn freeze<B: Backend, M: Module<B>>(
    model: M,
    path: &str,
    train_bn: bool,
) -> anyhow::Result<(M, Frozen)> {
    let mut mapper = FreezeUnder {
        paths: Paths::default(),
        under: path,
        train_bn,
        matched: 0,
        frozen: Frozen::default(),
    };
    let model = model.map(&mut mapper);
    if mapper.matched == 0 {
        let summary = crate::trainer::summary::summarize(&model);
        let top: Vec<&str> = summary.rows.iter().map(|row| row.name.as_str()).collect();
        anyhow::bail!(
            "the model has no parameters under module `{path}`; its top-level modules: {}",
            top.join(", ")
        );
    }
    Ok((model, mapper.frozen))
}

/// `model` with the parameters `frozen` names trainable again.
pub fn unfreeze<B: Backend, M: Module<B>>(model: M, frozen: &Frozen) -> M {
    model.map(&mut Unfreeze(frozen))
}

/// The elements of `model`'s float parameters under module `path` that take gradients, and
/// those that do not.
pub fn trainable_under<B: Backend, M: Module<B>>(model: &M, path: &str) -> (usize, usize) {
    let mut count = Count {
        paths: Paths::default(),
        under: path,
        counts: (0, 0),
    };
    model.visit(&mut count);
    count.counts
}

/// Moves the gradients of the parameters under each module path of `shares` out of `grads`,
/// one set per path with its share of the rate, for optimizer steps of their own.
pub(crate) fn split_by_share<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    shares: &BTreeMap<String, f64>,
) -> Vec<(f64, GradientsParams)> {
    (shares.iter())
        .map(|(path, &share)| {
            let mut split = Split {
                paths: Paths::default(),
                under: path,
                from: &mut *grads,
                into: GradientsParams::new(),
            };
            model.visit(&mut split);
            (share, split.into)
        })
        .collect()
}

/// The `enter_module` / `exit_module` of a visitor or mapper that keeps the path of the module
/// it is in as `self.paths`.
macro_rules! tracks_paths {
    () => {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            self.paths.enter(name, container_type);
        }

        fn exit_module(&mut self, _: &str, _: &str) {
            self.paths.exit();
        }
    };
}

/// The dotted path of the module being visited, and the types of the modules around it.
#[derive(Default)]
struct Paths {
    path: String,
    /// Length of `path` before each module entered, and that module's container type.
    entered: Vec<(usize, String)>,
}

impl Paths {
    fn enter(&mut self, name: &str, container_type: &str) {
        self.entered
            .push((self.path.len(), container_type.to_owned()));
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(name);
    }

    fn exit(&mut self) {
        if let Some((mark, _)) = self.entered.pop() {
            self.path.truncate(mark);
        }
    }

    /// Whether the current parameter is under module `prefix` (`""`: everything).
    fn under(&self, prefix: &str) -> bool {
        prefix.is_empty()
            || self.path == prefix
            || (self.path.starts_with(prefix) && self.path[prefix.len()..].starts_with('.'))
    }

    /// Whether the parameter being visited belongs to a batch-norm layer (burn passes the type
    /// of the module that holds a field when entering it: `Struct:BatchNorm`).
    fn in_batch_norm(&self) -> bool {
        (self.entered.last()).is_some_and(|(_, kind)| kind.ends_with("BatchNorm"))
    }
}

struct FreezeUnder<'a> {
    paths: Paths,
    under: &'a str,
    train_bn: bool,
    matched: usize,
    frozen: Frozen,
}

impl<B: Backend> ModuleMapper<B> for FreezeUnder<'_> {
    tracks_paths!();

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if !self.paths.under(self.under) {
            return param;
        }
        self.matched += 1;
        let (id, tensor, mapper) = param.consume();
        let keep = self.train_bn && self.paths.in_batch_norm();
        let tensor = if tensor.is_require_grad() && !keep {
            self.frozen.ids.insert(id);
            tensor.set_require_grad(false)
        } else {
            tensor
        };
        Param::from_mapped_value(id, tensor, mapper)
    }
}

struct Unfreeze<'a>(&'a Frozen);

impl<B: Backend> ModuleMapper<B> for Unfreeze<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if !self.0.ids.contains(&param.id) {
            return param;
        }
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, tensor.set_require_grad(true), mapper)
    }
}

struct Count<'a> {
    paths: Paths,
    under: &'a str,
    counts: (usize, usize),
}

impl<B: Backend> ModuleVisitor<B> for Count<'_> {
    tracks_paths!();

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.paths.under(self.under) {
            let tensor = param.val();
            let elements = tensor.shape().num_elements();
            match tensor.is_require_grad() {
                true => self.counts.0 += elements,
                false => self.counts.1 += elements,
            }
        }
    }
}

struct Split<'a> {
    paths: Paths,
    under: &'a str,
    from: &'a mut GradientsParams,
    into: GradientsParams,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Split<'_> {
    tracks_paths!();

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.paths.under(self.under)
            && let Some(grad) = self.from.remove::<B::InnerBackend, D>(param.id)
        {
            self.into.register(param.id, grad);
        }
    }
}
