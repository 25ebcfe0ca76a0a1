//! A StableHLO function under construction, written as MLIR text in the generic op syntax
//! (`%3 = "stablehlo.add"(%1, %2) : (T, T) -> T`), which every StableHLO op accepts.
//!
//! SSA names are numbered in emission order and parameters in order of first use, so two
//! segments that do the same work on different tensors and scalars produce the same text:
//! the text itself is the compile cache's key.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use burn_backend::DType;
use burn_ir::{ScalarIr, TensorId, TensorIr};

use super::types::{literal, mlir_type, tensor_type};

/// A value in the function: its SSA name and what it holds.
#[derive(Debug, Clone)]
pub struct Val {
    /// The SSA name, e.g. `%12` or `%7#1`.
    pub name: String,
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
}

impl Val {
    /// The MLIR type, e.g. `tensor<2x3xf32>`.
    pub fn ty(&self) -> String {
        tensor_type(&self.shape, self.dtype)
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

/// Scalars lifted out of the program into one 1-D parameter per dtype, so that a value that
/// changes each step (a learning rate, Adam's bias correction) does not change the program.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Scalars {
    /// (dtype, values in slot order), in order of first use.
    pub by_dtype: Vec<(DType, Vec<Lifted>)>,
}

/// One lifted scalar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lifted {
    /// Its value.
    pub value: ScalarIr,
    /// Where it sat in the recorded ops (its address), so that a later segment of the same
    /// structure can find its own value for this parameter without being lowered again.
    pub origin: usize,
}

/// How a program spreads over several devices as one SPMD program: the tensors of `split`
/// are divided by rows (their first dimension) among the devices, each device passing its rows
/// (`ceil(rows / devices)`, the last padded), every other tensor is whole on each, and XLA's
/// partitioner splits the work and adds the collectives.
#[derive(Debug, Clone)]
pub struct Spmd {
    /// The devices (partitions).
    pub devices: usize,
    /// The tensors divided by rows: a batch, each device working on its share.
    pub split: HashSet<TensorId>,
}

impl Spmd {
    /// The `mhlo.sharding` of a tensor of `rank` divided by rows over the devices.
    fn rows(&self, rank: usize) -> String {
        let mut tiles = vec![self.devices.to_string()];
        tiles.resize(rank, "1".into());
        let devices: Vec<String> = (0..self.devices).map(|d| d.to_string()).collect();
        format!("{{devices=[{}]{}}}", tiles.join(","), devices.join(","))
    }
}

/// The `mhlo.sharding` of a tensor whole on every device.
const REPLICATED: &str = "mhlo.sharding = \"{replicated}\"";

/// A function being emitted.
pub struct Function {
    body: String,
    next: usize,
    values: HashMap<TensorId, Val>,
    params: Vec<(TensorId, Val)>,
    scalars: Scalars,
    spmd: Option<Spmd>,
}

/// What [`Function::finish`] returns: the module text and what to pass it.
pub struct Emitted {
    /// The whole module, `func.func @main`.
    pub text: String,
    /// The tensors to pass, in parameter order (before the scalar vectors).
    pub inputs: Vec<TensorId>,
    /// The scalar vectors to pass after them.
    pub scalars: Scalars,
}

/// An op the emitter cannot lower yet, or a program it cannot build.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the xla accelerator cannot run {0} yet (not lowered to StableHLO)")]
pub struct Unsupported(pub String);

impl Default for Function {
    fn default() -> Self {
        Self::new()
    }
}

impl Function {
    /// An empty function.
    pub fn new() -> Self {
        Function {
            body: String::with_capacity(16 * 1024),
            next: 0,
            values: HashMap::new(),
            params: Vec::new(),
            scalars: Scalars::default(),
            spmd: None,
        }
    }

    /// An empty function for several devices, laid out as `spmd` says.
    pub fn partitioned(spmd: Spmd) -> Self {
        Function {
            spmd: Some(spmd),
            ..Self::new()
        }
    }

    /// The value of tensor `t`: an earlier op's result, or a new parameter on first use.
    pub fn get(&mut self, t: &TensorIr) -> Val {
        if let Some(v) = self.values.get(&t.id) {
            return v.clone();
        }
        let v = Val {
            name: format!("%a{}", self.params.len()),
            shape: t.shape.to_vec(),
            dtype: t.dtype,
        };
        self.params.push((t.id, v.clone()));
        self.values.insert(t.id, v.clone());
        v
    }

    /// Binds tensor `t` (an op's output) to `v`, reshaping or converting if the op's result
    /// differs only in those (it must not differ otherwise).
    pub fn set(&mut self, t: &TensorIr, v: Val) {
        let mut v = v;
        if v.dtype != t.dtype {
            v = self.convert(&v, t.dtype);
        }
        if v.shape != t.shape.as_slice() {
            assert_eq!(
                v.shape.iter().product::<usize>(),
                t.shape.num_elements(),
                "lowering produced {:?} for {:?}",
                v.shape,
                t.shape
            );
            v = self.reshape(&v, t.shape.as_slice());
        }
        self.values.insert(t.id, v);
    }

    fn fresh(&mut self) -> String {
        let n = self.next;
        self.next += 1;
        format!("%{n}")
    }

    /// Emits `name(args) {attrs}` with one result of `shape` and `dtype`.
    pub fn op(
        &mut self,
        name: &str,
        args: &[&Val],
        attrs: &str,
        shape: &[usize],
        dtype: DType,
    ) -> Val {
        let out = Val {
            name: self.fresh(),
            shape: shape.to_vec(),
            dtype,
        };
        self.line(&out.name, name, args, attrs, "", &[&out]);
        out
    }

    /// Emits an op with a region (`body`, the text inside `({ ... })`) and several results.
    pub fn op_multi(
        &mut self,
        name: &str,
        args: &[&Val],
        body: &str,
        attrs: &str,
        outs: &[(Vec<usize>, DType)],
    ) -> Vec<Val> {
        let base = self.fresh();
        let vals: Vec<Val> = outs
            .iter()
            .enumerate()
            .map(|(i, (shape, dtype))| Val {
                name: if outs.len() == 1 {
                    base.clone()
                } else {
                    format!("{base}#{i}")
                },
                shape: shape.clone(),
                dtype: *dtype,
            })
            .collect();
        let lhs = if outs.len() == 1 {
            base
        } else {
            format!("{base}:{}", outs.len())
        };
        let refs: Vec<&Val> = vals.iter().collect();
        self.line(&lhs, name, args, attrs, body, &refs);
        vals
    }

    fn line(
        &mut self,
        lhs: &str,
        name: &str,
        args: &[&Val],
        attrs: &str,
        body: &str,
        outs: &[&Val],
    ) {
        let b = &mut self.body;
        let _ = write!(b, "    {lhs} = \"{name}\"(");
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                b.push_str(", ");
            }
            b.push_str(&a.name);
        }
        b.push(')');
        if !body.is_empty() {
            let _ = write!(b, " ({{\n{body}    }})");
        }
        if !attrs.is_empty() {
            let _ = write!(b, " {{{attrs}}}");
        }
        b.push_str(" : (");
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                b.push_str(", ");
            }
            b.push_str(&a.ty());
        }
        b.push_str(") -> ");
        if outs.len() == 1 {
            b.push_str(&outs[0].ty());
        } else {
            b.push('(');
            for (i, o) in outs.iter().enumerate() {
                if i > 0 {
                    b.push_str(", ");
                }
                b.push_str(&o.ty());
            }
            b.push(')');
        }
        b.push('\n');
    }

    /// A fresh name for a region's block argument or value.
    pub fn region_name(&mut self) -> String {
        let n = self.next;
        self.next += 1;
        format!("%r{n}")
    }

    /// A constant scalar of `dtype` broadcast to `shape`.
    pub fn constant(&mut self, value: f64, dtype: DType, shape: &[usize]) -> Val {
        let attr = format!(
            "value = dense<{}> : {}",
            literal(value, dtype),
            tensor_type(&[], dtype)
        );
        let c = self.op("stablehlo.constant", &[], &attr, &[], dtype);
        self.broadcast_scalar(&c, shape)
    }

    /// A constant tensor of `shape` holding `values` (row-major), as raw little-endian bytes.
    pub fn dense(&mut self, values: &[f64], shape: &[usize], dtype: DType) -> Val {
        let mut hex = String::with_capacity(values.len() * 8 + 2);
        hex.push_str("0x");
        for &v in values {
            let bytes: Vec<u8> = match dtype {
                DType::F64 => v.to_le_bytes().to_vec(),
                DType::F16 => half::f16::from_f64(v).to_le_bytes().to_vec(),
                DType::BF16 => half::bf16::from_f64(v).to_le_bytes().to_vec(),
                _ => (v as f32).to_le_bytes().to_vec(),
            };
            for b in bytes {
                let _ = write!(hex, "{b:02X}");
            }
        }
        let attr = format!("value = dense<\"{hex}\"> : {}", tensor_type(shape, dtype));
        self.op("stablehlo.constant", &[], &attr, shape, dtype)
    }

    /// A scalar from the graph as a 0-d value of `dtype`: lifted into the scalar parameter of
    /// that dtype (booleans, which steer programs rather than feed them, stay constants).
    /// `value` must be the op's own field, not a copy: its address is how a later segment of
    /// the same structure finds its value (see `backend::signature`).
    pub fn scalar(&mut self, value: &ScalarIr, dtype: DType) -> Val {
        if let ScalarIr::Bool(b) = value {
            return self.constant(f64::from(u8::from(*b)), dtype, &[]);
        }
        let slot = match self.scalars.by_dtype.iter().position(|(d, _)| *d == dtype) {
            Some(i) => i,
            None => {
                self.scalars.by_dtype.push((dtype, Vec::new()));
                self.scalars.by_dtype.len() - 1
            }
        };
        let values = &mut self.scalars.by_dtype[slot].1;
        let index = values.len();
        values.push(Lifted {
            value: *value,
            origin: value as *const ScalarIr as usize,
        });
        // The vector's length is only known at the end: a placeholder, replaced by `finish`.
        let vector = Val {
            name: format!("%s{slot}"),
            shape: vec![usize::MAX - slot],
            dtype,
        };
        let attrs = format!(
            "start_indices = array<i64: {index}>, limit_indices = array<i64: {}>, strides = array<i64: 1>",
            index + 1
        );
        let one = self.op("stablehlo.slice", &[&vector], &attrs, &[1], dtype);
        self.reshape(&one, &[])
    }

    /// Ends the function, returning `outputs` in order. Each input in `lent` (inputs no one
    /// reads after this program, each with an output of its type) lends its buffer to that
    /// output: the program writes the output in the input's memory, and the input is gone
    /// after it runs.
    pub fn finish(
        mut self,
        outputs: &[TensorId],
        lent: &HashMap<TensorId, TensorId>,
    ) -> Result<Emitted, Unsupported> {
        let mut results = Vec::with_capacity(outputs.len());
        for id in outputs {
            let v = self
                .values
                .get(id)
                .ok_or_else(|| Unsupported(format!("an output ({id}) that no op produced")))?;
            results.push(v.clone());
        }
        let types: Vec<String> = results.iter().map(Val::ty).collect();
        let spmd = self.spmd.is_some();
        let mut head = String::from("func.func @main(");
        let mut first = true;
        for (id, p) in &self.params {
            if !first {
                head.push_str(", ");
            }
            first = false;
            let ty = p.ty();
            let _ = write!(head, "{}: {ty}", p.name);
            let mut attrs = Vec::new();
            // A tensor split by rows has a device's rows on each device: it lends its buffer
            // to no output, which every device holds whole.
            let rows = match &self.spmd {
                Some(spmd) if spmd.split.contains(id) && p.rank() > 0 => Some(spmd.rows(p.rank())),
                _ => None,
            };
            if rows.is_none()
                && let Some(output) = lent.get(id)
                && let Some(out) = outputs.iter().position(|o| o == output)
                && types[out] == ty
            {
                attrs.push(format!("tf.aliasing_output = {out} : i32"));
            }
            match rows {
                Some(sharding) => attrs.push(format!("mhlo.sharding = \"{sharding}\"")),
                None if spmd => attrs.push(REPLICATED.into()),
                None => {}
            }
            if !attrs.is_empty() {
                let _ = write!(head, " {{{}}}", attrs.join(", "));
            }
        }
        for (slot, (dtype, values)) in self.scalars.by_dtype.iter().enumerate() {
            if !first {
                head.push_str(", ");
            }
            first = false;
            let ty = tensor_type(&[values.len()], *dtype);
            let _ = write!(head, "%s{slot}: {ty}");
            if spmd {
                let _ = write!(head, " {{{REPLICATED}}}");
            }
            let placeholder = format!("tensor<{}x{}>", usize::MAX - slot, mlir_type(*dtype));
            self.body = self.body.replace(&placeholder, &ty);
        }
        head.push_str(") -> (");
        let results_head: Vec<String> = match spmd {
            true => types
                .iter()
                .map(|t| format!("{t} {{{REPLICATED}}}"))
                .collect(),
            false => types.clone(),
        };
        head.push_str(&results_head.join(", "));
        head.push_str(") {\n");
        let names: Vec<&str> = results.iter().map(|v| v.name.as_str()).collect();
        let mut text = head;
        text.push_str(&self.body);
        let _ = writeln!(
            text,
            "    \"func.return\"({}) : ({}) -> ()",
            names.join(", "),
            types.join(", ")
        );
        text.push_str("}\n");
        if let Some(spmd) = &self.spmd {
            text = format!(
                "module @main attributes {{mhlo.num_partitions = {} : i32, mhlo.num_replicas = 1 : i32}} {{\n{text}}}\n",
                spmd.devices
            );
        }
        Ok(Emitted {
            text,
            inputs: self.params.into_iter().map(|(id, _)| id).collect(),
            scalars: self.scalars,
        })
    }
}
