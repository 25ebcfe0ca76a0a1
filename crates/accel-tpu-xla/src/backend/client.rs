//! The lazy runner client: records ops, and at a read (or a cap) compiles the recorded segment
//! once per shape of program, runs it, and keeps what is still referenced on the device.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use burn_backend::{DType, DTypeUsage, DTypeUsageSet, ExecutionError, TensorData};
use burn_ir::{
    FloatOperationIr, NumericOperationIr, OperationIr, TensorId, TensorIr, TensorStatus,
};
use burn_router::{RouterTensor, RunnerClient};
use burn_std::future::DynFut;

use super::data::{self, dims, element_type};
use super::device::XlaDevice;
use super::runtime::{Runtime, runtime};
use super::segment;
use crate::hlo::Scalars;
use crate::pjrt::Buffer;

/// Ops recorded before a segment is cut even without a read, bounding host memory and
/// program size.
const MAX_OPS: usize = 20_000;

/// A tensor on the device.
struct Stored {
    buffer: Buffer,
}

/// What one device's client holds: the ops since the last cut and the live device tensors.
#[derive(Default)]
struct State {
    ops: Vec<OperationIr>,
    tensors: HashMap<TensorId, Stored>,
}

/// The runner client of one xla device.
#[derive(Clone)]
pub struct XlaClient {
    device: XlaDevice,
    state: Arc<Mutex<State>>,
    ids: Arc<AtomicU64>,
}

fn fail(reason: impl Into<String>) -> ExecutionError {
    ExecutionError::WithContext {
        reason: reason.into(),
    }
}

impl XlaClient {
    /// A client for `device`.
    pub fn new(device: XlaDevice) -> Self {
        XlaClient {
            device,
            state: Arc::new(Mutex::new(State::default())),
            ids: Arc::new(AtomicU64::new(0)),
        }
    }

    fn runtime(&self) -> Result<&'static Runtime, ExecutionError> {
        runtime().map_err(fail)
    }

    fn next_id(&self) -> TensorId {
        TensorId::new(self.ids.fetch_add(1, Ordering::Relaxed))
    }

    fn upload(&self, data: &TensorData) -> Result<Buffer, ExecutionError> {
        let ty = element_type(data.dtype).map_err(fail)?;
        self.runtime()?
            .client()
            .upload(data.as_bytes(), ty, &dims(&data.shape), self.device.index)
            .map_err(|e| fail(e.to_string()))
    }

    /// Runs everything recorded so far.
    fn flush(&self, state: &mut State) -> Result<(), ExecutionError> {
        if state.ops.is_empty() {
            return Ok(());
        }
        let ops = std::mem::take(&mut state.ops);
        let built = segment::build(&ops).map_err(|e| fail(e.to_string()))?;
        if let Some(program) = &built.program {
            let rt = self.runtime()?;
            let exe = rt.executable(&program.text).map_err(fail)?;
            let scalars = self.scalar_buffers(&program.scalars)?;
            let mut args: Vec<&Buffer> = Vec::with_capacity(program.inputs.len() + scalars.len());
            for id in &program.inputs {
                let stored = state.tensors.get(id).ok_or_else(|| {
                    fail(format!(
                        "xla: tensor {id} is read by a program but holds no data"
                    ))
                })?;
                args.push(&stored.buffer);
            }
            args.extend(scalars.iter());
            let outs = rt
                .client()
                .execute(&exe, &args, self.device.index)
                .map_err(|e| fail(e.to_string()))?;
            rt.record_execution();
            for (id, buffer) in built.outputs.iter().zip(outs) {
                state.tensors.insert(*id, Stored { buffer });
            }
        }
        for id in &built.freed {
            state.tensors.remove(id);
        }
        Ok(())
    }

    fn scalar_buffers(&self, scalars: &Scalars) -> Result<Vec<Buffer>, ExecutionError> {
        scalars
            .by_dtype
            .iter()
            .map(|(dtype, values)| {
                let data = scalar_data(values, *dtype);
                self.upload(&data)
            })
            .collect()
    }

    /// Makes a random op's output on the host, now: it has no inputs, and drawing it from the
    /// seeded stream keeps runs repeatable.
    fn materialize_random(
        &self,
        state: &mut State,
        out: &TensorIr,
        distribution: burn_backend::Distribution,
    ) {
        let data = data::random(&out.shape, distribution, out.dtype);
        let data = if data.dtype == out.dtype {
            data
        } else {
            data.convert_dtype(out.dtype)
        };
        match self.upload(&data) {
            Ok(buffer) => {
                state.tensors.insert(out.id, Stored { buffer });
            }
            Err(e) => panic!("xla: cannot upload a random tensor: {e}"),
        }
    }
}

/// One dtype's scalars as a 1-D tensor.
fn scalar_data(values: &[burn_ir::ScalarIr], dtype: DType) -> TensorData {
    let shape = [values.len()];
    let data = if dtype.is_float() {
        TensorData::new(values.iter().map(|v| v.elem::<f64>()).collect(), shape)
    } else {
        TensorData::new(values.iter().map(|v| v.elem::<i64>()).collect(), shape)
    };
    data.convert_dtype(dtype)
}

impl RunnerClient for XlaClient {
    type Device = XlaDevice;

    fn register_op(&self, op: OperationIr) {
        let mut state = self.state.lock().expect("xla state lock");
        match &op {
            OperationIr::Float(_, FloatOperationIr::Random(r))
            | OperationIr::NumericInt(_, NumericOperationIr::IntRandom(r)) => {
                self.materialize_random(&mut state, &r.out, r.distribution);
                return;
            }
            OperationIr::Init(_) => return,
            OperationIr::Drop(t) if state.ops.is_empty() => {
                state.tensors.remove(&t.id);
                return;
            }
            _ => {}
        }
        state.ops.push(op);
        if state.ops.len() >= MAX_OPS
            && let Err(e) = self.flush(&mut state)
        {
            panic!("{e}");
        }
    }

    fn read_tensor_async(&self, tensor: TensorIr) -> DynFut<Result<TensorData, ExecutionError>> {
        let result = (|| {
            let mut state = self.state.lock().expect("xla state lock");
            self.flush(&mut state)?;
            let stored = state
                .tensors
                .get(&tensor.id)
                .ok_or_else(|| fail(format!("xla: tensor {} holds no data", tensor.id)))?;
            let ty = element_type(tensor.dtype).map_err(fail)?;
            let mut bytes = vec![0u8; tensor.shape.num_elements() * ty.size()];
            stored
                .buffer
                .download(&mut bytes)
                .map_err(|e| fail(e.to_string()))?;
            if tensor.status == TensorStatus::ReadWrite {
                state.tensors.remove(&tensor.id);
            }
            Ok(TensorData::from_bytes_vec(
                bytes,
                tensor.shape.clone(),
                tensor.dtype,
            ))
        })();
        Box::pin(async move { result })
    }

    fn sync(&self) -> Result<(), ExecutionError> {
        let mut state = self.state.lock().expect("xla state lock");
        self.flush(&mut state)
    }

    fn create_empty_handle(&self) -> TensorId {
        self.next_id()
    }

    fn register_tensor_data(&self, data: TensorData) -> RouterTensor<Self> {
        let id = self.next_id();
        let data = match data.dtype {
            DType::Bool(burn_backend::BoolStore::U32) => {
                data.convert_dtype(DType::Bool(burn_backend::BoolStore::Native))
            }
            _ => data,
        };
        let buffer = self.upload(&data).unwrap_or_else(|e| panic!("{e}"));
        self.state
            .lock()
            .expect("xla state lock")
            .tensors
            .insert(id, Stored { buffer });
        RouterTensor::new(id, data.shape.clone(), data.dtype, self.clone())
    }

    fn device(&self) -> XlaDevice {
        self.device
    }

    fn seed(&self, seed: u64) {
        data::seed(seed);
    }

    fn dtype_usage(&self, dtype: DType) -> DTypeUsageSet {
        match element_type(dtype) {
            Ok(_) => DTypeUsage::Storage | DTypeUsage::Arithmetic,
            Err(_) => DTypeUsageSet::empty(),
        }
    }
}
