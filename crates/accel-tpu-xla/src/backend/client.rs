//! The lazy runner client: records ops, and at a read, when the next batch is made, at
//! [`XlaClient::mark_step`] or at a cap compiles the recorded segment once per shape of
//! program, starts it without waiting for it, and keeps what is still referenced on the device.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use burn_backend::{DType, DTypeUsage, DTypeUsageSet, ExecutionError, TensorData};
use burn_ir::{
    FloatOperationIr, NumericOperationIr, OperationIr, TensorId, TensorIr, TensorStatus,
};
use burn_router::{RouterTensor, RunnerClient};
use burn_std::future::DynFut;

use super::clients::Placement;
use super::data::{self, dims, element_type};
use super::device::XlaDevice;
use super::in_flight::InFlight;
use super::rows;
use super::runtime::{Runtime, runtime};
use super::segment::{self, Failure};
use super::signature::Signature;
use super::template::{Bound, Template};
use crate::hlo::{Function, Spmd};
use crate::pjrt::{Buffer, Executable, Running};

/// Ops recorded before a segment is cut even without a read, bounding host memory and
/// program size.
const MAX_OPS: usize = 20_000;

/// What one device's client holds: the ops since the last cut, the live device tensors, the
/// tensors that could not be made, with why, and the programs still running.
#[derive(Default)]
struct State {
    ops: Vec<OperationIr>,
    /// The buffers of each live tensor, one per device the client's device spans (each holds
    /// the whole tensor).
    tensors: HashMap<TensorId, Vec<Buffer>>,
    /// The batch tensors of a device spanning several: programs split them by rows.
    split: HashSet<TensorId>,
    failed: HashMap<TensorId, Failure>,
    in_flight: InFlight<Running>,
    /// The item count of the batch being made ([`XlaClient::batch_scope`]): an upload of that
    /// many rows meanwhile is the batch's.
    batch_rows: Option<usize>,
}

impl State {
    /// Forgets a tensor that no one will use again.
    fn free(&mut self, id: &TensorId) {
        self.tensors.remove(id);
        self.split.remove(id);
        self.failed.remove(id);
    }
}

/// The runner client of one xla device.
#[derive(Clone)]
pub struct XlaClient {
    device: XlaDevice,
    /// Where the device lives, found on first use (uploads and starts ask every step).
    placement: Arc<OnceLock<Placement>>,
    state: Arc<Mutex<State>>,
    ids: Arc<AtomicU64>,
    /// Bytes copied to the device so far (how far ahead the host may run, [`InFlight`]).
    copied: Arc<AtomicU64>,
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
            placement: Arc::new(OnceLock::new()),
            state: Arc::new(Mutex::new(State::default())),
            ids: Arc::new(AtomicU64::new(0)),
            copied: Arc::new(AtomicU64::new(0)),
        }
    }

    fn runtime(&self) -> Result<&'static Runtime, ExecutionError> {
        runtime().map_err(fail)
    }

    fn next_id(&self) -> TensorId {
        TensorId::new(self.ids.fetch_add(1, Ordering::Relaxed))
    }

    /// Where this client's device lives on the plugin's clients.
    fn placement(&self) -> Result<Placement, ExecutionError> {
        if let Some(at) = self.placement.get() {
            return Ok(*at);
        }
        let at = self.runtime()?.placement(&self.device).map_err(fail)?;
        Ok(*self.placement.get_or_init(|| at))
    }

    /// Bytes copied to the device so far.
    fn copied(&self) -> u64 {
        self.copied.load(Ordering::Relaxed)
    }

    /// Counts `bytes` copied to the device.
    fn count_copied(&self, bytes: usize) {
        self.copied.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Copies `data` to every device this client's device spans.
    fn upload(&self, data: &TensorData) -> Result<Vec<Buffer>, ExecutionError> {
        let at = self.placement()?;
        self.count_copied(data.bytes.len() * self.device.span);
        (at.first..at.first + self.device.span)
            .map(|index| upload_to(at.client, data, index))
            .collect()
    }

    /// Copies each device its rows of `data` (see [`rows`]).
    fn upload_rows(&self, data: &TensorData) -> Result<Vec<Buffer>, ExecutionError> {
        let at = self.placement()?;
        self.count_copied(data.bytes.len());
        let shards = rows::split(data, self.device.span);
        (at.first..at.first + self.device.span)
            .zip(&shards)
            .map(|(index, shard)| upload_to(at.client, shard, index))
            .collect()
    }

    /// An empty function for this client's device: partitioned over its devices, with the
    /// batch tensors split by rows, when it spans several.
    fn function(&self, state: &State) -> Function {
        match self.device.span {
            1 => Function::new(),
            devices => Function::partitioned(Spmd {
                devices,
                split: state.split.clone(),
            }),
        }
    }

    /// Runs everything recorded so far. A tensor that cannot be made (an op not lowered, a
    /// program the plugin rejects) keeps its error, reported when it is read; the first such
    /// error of the segment is also returned.
    fn flush(&self, state: &mut State) -> Result<(), ExecutionError> {
        if state.ops.is_empty() {
            return Ok(());
        }
        let mut ops = std::mem::take(&mut state.ops);
        let result = self.cut(state, &ops);
        // The list goes back with its capacity: a steady step records as many ops each time,
        // and growing it from nothing again cost ~15% of the host thread on digits (reallocs).
        ops.clear();
        state.ops = ops;
        result
    }

    /// Runs `ops`, the segment [`flush`](Self::flush) cut.
    fn cut(&self, state: &mut State, ops: &[OperationIr]) -> Result<(), ExecutionError> {
        let start = Instant::now();
        let rt = self.runtime()?;
        let mut sig = Signature::of(ops);
        if self.device.span > 1 {
            sig.partitioned(self.device.span, &state.split);
        }
        let reads_failed =
            !state.failed.is_empty() && sig.ids.iter().any(|id| state.failed.contains_key(id));
        let known = if reads_failed {
            None
        } else {
            rt.template(&sig)
        };
        let (bound, failed, program) = match known {
            Some((exe, bound)) => (bound, Vec::new(), Ok(Some((exe, Duration::ZERO)))),
            None => self.lower(rt, state, ops, sig),
        };
        let mut result = match program {
            Ok(Some((exe, compiling))) => self.run(state, &exe, &bound, start, compiling),
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            let cause = Failure::from(e.to_string());
            for id in &bound.outputs {
                state.failed.insert(*id, cause.clone());
            }
        }
        if let (Ok(()), Some((_, cause))) = (&result, failed.first()) {
            result = Err(fail(cause.to_string()));
        }
        state.failed.extend(failed);
        for id in &bound.freed {
            state.free(id);
        }
        result
    }

    /// Lowers a segment whose structure has no template yet: its tensors and scalars, the
    /// tensors it cannot make, and its program (compiled or found by its text; `None` when it
    /// has nothing to run). Remembers it as a template when every op lowered.
    #[allow(clippy::type_complexity)]
    fn lower(
        &self,
        rt: &'static Runtime,
        state: &State,
        ops: &[OperationIr],
        sig: Signature,
    ) -> (
        Bound,
        Vec<(TensorId, Failure)>,
        Result<Option<(Arc<Executable>, Duration)>, ExecutionError>,
    ) {
        let built = segment::build(ops, &state.failed, self.function(state));
        rt.record_lowering();
        let bound = Bound::of(&built);
        let Some(program) = &built.program else {
            return (bound, built.failed, Ok(None));
        };
        let (exe, compiling) = match rt.executable(&program.text, self.device.span) {
            Ok(found) => found,
            Err(e) => return (bound, built.failed, Err(fail(e))),
        };
        if built.failed.is_empty()
            && let Some(template) = Template::new(&sig, &built, program, exe.clone())
        {
            rt.remember(sig, template);
        }
        (bound, built.failed, Ok(Some((exe, compiling))))
    }

    /// Starts a segment's program (on each device this client's device spans), keeping its
    /// outputs; waits for the oldest programs still running while [`InFlight`] says the host
    /// has run too far ahead.
    fn run(
        &self,
        state: &mut State,
        exe: &Executable,
        bound: &Bound,
        start: Instant,
        compiling: Duration,
    ) -> Result<(), ExecutionError> {
        let rt = self.runtime()?;
        let scalars = bound
            .scalars
            .iter()
            .map(|(dtype, values)| self.upload(&scalar_data(values, *dtype)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut inputs: Vec<&[Buffer]> = Vec::with_capacity(bound.inputs.len() + scalars.len());
        for id in &bound.inputs {
            let buffers = state.tensors.get(id).ok_or_else(|| {
                fail(format!(
                    "xla: tensor {id} is read by a program but holds no data"
                ))
            })?;
            inputs.push(buffers);
        }
        inputs.extend(scalars.iter().map(Vec::as_slice));
        let args: Vec<Vec<&Buffer>> = (0..self.device.span)
            .map(|d| inputs.iter().map(|buffers| &buffers[d]).collect())
            .collect();
        let at = self.placement()?;
        let launching = Instant::now();
        let started = match self.device.span {
            1 => (at.client.start(exe, &args[0], at.first))
                .map(|(outs, running)| (vec![outs], running)),
            _ => {
                let args: Vec<&[&Buffer]> = args.iter().map(Vec::as_slice).collect();
                at.client.start_replicated(exe, &args)
            }
        };
        let (outs, running) = started.map_err(|e| fail(e.to_string()))?;
        rt.record_cut(launching - start - compiling, launching.elapsed());
        state.in_flight.started(running, self.copied());
        while let Some(oldest) = state.in_flight.over_limit(self.copied()) {
            let waiting = Instant::now();
            let waited = oldest.wait();
            rt.record_wait(waiting.elapsed());
            waited.map_err(|e| fail(e.to_string()))?;
        }
        let mut per_output: Vec<Vec<Buffer>> = bound.outputs.iter().map(|_| Vec::new()).collect();
        for device_outs in outs {
            for (buffers, buffer) in per_output.iter_mut().zip(device_outs) {
                buffers.push(buffer);
            }
        }
        for (id, buffers) in bound.outputs.iter().zip(per_output) {
            state.tensors.insert(*id, buffers);
        }
        Ok(())
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
            Ok(buffers) => {
                state.tensors.insert(out.id, buffers);
            }
            Err(e) => panic!("xla: cannot upload a random tensor: {e}"),
        }
    }

    /// Adds `op` to the segment (or, for ops with nothing to compile, does it now); true when
    /// the segment has reached its cap.
    fn record(&self, state: &mut State, op: OperationIr) -> bool {
        match &op {
            OperationIr::Float(_, FloatOperationIr::Random(r))
            | OperationIr::NumericInt(_, NumericOperationIr::IntRandom(r)) => {
                self.materialize_random(state, &r.out, r.distribution);
                return false;
            }
            OperationIr::Init(_) => return false,
            OperationIr::Drop(t) if state.ops.is_empty() => {
                state.free(&t.id);
                return false;
            }
            _ => {}
        }
        state.ops.push(op);
        state.ops.len() >= MAX_OPS
    }
}

/// `data` copied to device `index` of `client`.
fn upload_to(
    client: &crate::pjrt::Client,
    data: &TensorData,
    index: usize,
) -> Result<Buffer, ExecutionError> {
    let ty = element_type(data.dtype).map_err(fail)?;
    (client.upload(data.as_bytes(), ty, &dims(&data.shape), index)).map_err(|e| fail(e.to_string()))
}

/// A live tensor's values, copied to the host: the whole tensor the devices hold (every device
/// holds all of it but a batch's, whose rows are joined from each device's share).
fn download(state: &State, tensor: &TensorIr) -> Result<TensorData, ExecutionError> {
    if !state.split.contains(&tensor.id) {
        return download_from(state, tensor, 0);
    }
    let buffers = (state.tensors.get(&tensor.id))
        .ok_or_else(|| fail(format!("xla: tensor {} holds no data", tensor.id)))?;
    let shards = (0..buffers.len())
        .map(|device| Ok(download_from(state, tensor, device)?.as_bytes().to_vec()))
        .collect::<Result<Vec<_>, ExecutionError>>()?;
    Ok(rows::join(shards, &tensor.shape, tensor.dtype))
}

/// What the `device`-th device the client's device spans holds of a live tensor: all of it, or
/// its rows of a batch's.
fn download_from(
    state: &State,
    tensor: &TensorIr,
    device: usize,
) -> Result<TensorData, ExecutionError> {
    let buffers = (state.tensors.get(&tensor.id))
        .ok_or_else(|| fail(format!("xla: tensor {} holds no data", tensor.id)))?;
    let buffer = (buffers.get(device))
        .ok_or_else(|| fail(format!("xla: tensor {} has no device {device}", tensor.id)))?;
    let mut shape = tensor.shape.clone();
    if state.split.contains(&tensor.id) {
        shape[0] = rows::per_device(shape[0], buffers.len());
    }
    let ty = element_type(tensor.dtype).map_err(fail)?;
    let mut bytes = vec![0u8; shape.num_elements() * ty.size()];
    (buffer.download(&mut bytes)).map_err(|e| fail(e.to_string()))?;
    Ok(TensorData::from_bytes_vec(bytes, shape, tensor.dtype))
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

impl XlaClient {
    /// Starts what is recorded without waiting for it (see [`mark_step`](super::mark_step)). A
    /// failure is kept with the tensors it concerns and reported where one is read.
    pub fn mark_step(&self) {
        let mut state = self.state.lock().expect("xla state lock");
        let _ = self.flush(&mut state);
    }

    /// Starts (`Some(rows)`) or ends (`None`) the making of a batch of `rows` items (see
    /// [`batch_scope`](super::batch_scope)): a new batch first starts what the last one
    /// recorded, a whole step.
    pub fn batch_scope(&self, rows: Option<usize>) {
        let mut state = self.state.lock().expect("xla state lock");
        if rows.is_some() {
            let _ = self.flush(&mut state);
        }
        state.batch_rows = rows;
    }

    /// What each device the client's device spans holds of `tensor` (all of it, or its rows of
    /// a batch's), after running what is recorded: for checks that the devices agree.
    pub fn read_each_device(&self, tensor: &TensorIr) -> Result<Vec<TensorData>, ExecutionError> {
        let mut state = self.state.lock().expect("xla state lock");
        self.flush(&mut state)?;
        if let Some(cause) = state.failed.get(&tensor.id) {
            return Err(fail(cause.to_string()));
        }
        let copies = (0..self.device.span)
            .map(|device| download_from(&state, tensor, device))
            .collect();
        if tensor.status == TensorStatus::ReadWrite {
            state.free(&tensor.id);
        }
        copies
    }
}

impl RunnerClient for XlaClient {
    type Device = XlaDevice;

    fn register_op(&self, op: OperationIr) {
        let start = Instant::now();
        let mut state = self.state.lock().expect("xla state lock");
        let full = self.record(&mut state, op);
        if let Ok(rt) = runtime() {
            rt.record_recording(start.elapsed());
        }
        if full {
            // A failure is kept with the tensors it concerns and reported where one is read.
            let _ = self.flush(&mut state);
        }
    }

    fn read_tensor_async(&self, tensor: TensorIr) -> DynFut<Result<TensorData, ExecutionError>> {
        let mut state = self.state.lock().expect("xla state lock");
        // A failure is kept with the tensors it concerns: this one's is reported below.
        let _ = self.flush(&mut state);
        let waiting = Instant::now();
        let result = match state.failed.get(&tensor.id) {
            Some(cause) => Err(fail(cause.to_string())),
            None => download(&state, &tensor),
        };
        if let Ok(rt) = runtime() {
            rt.record_wait(waiting.elapsed());
        }
        if tensor.status == TensorStatus::ReadWrite {
            state.free(&tensor.id);
        }
        Box::pin(async move { result })
    }

    fn sync(&self) -> Result<(), ExecutionError> {
        let mut state = self.state.lock().expect("xla state lock");
        self.flush(&mut state)?;
        let waiting = Instant::now();
        let waited = state.in_flight.take_all().try_for_each(Running::wait);
        self.runtime()?.record_wait(waiting.elapsed());
        waited.map_err(|e| fail(e.to_string()))
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
        // A batch's tensor, made while a loader's batcher runs: split by rows over the devices,
        // each device given only its rows.
        let batch = self.state.lock().expect("xla state lock").batch_rows;
        let rows = data.shape.first().copied();
        let split = self.device.span > 1 && rows.is_some() && batch == rows;
        let buffers = match split {
            true => self.upload_rows(&data),
            false => self.upload(&data),
        };
        let buffers = buffers.unwrap_or_else(|e| panic!("{e}"));
        let mut state = self.state.lock().expect("xla state lock");
        state.tensors.insert(id, buffers);
        if split {
            state.split.insert(id);
        }
        drop(state);
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
