//! NCCL between CUDA ranks: `ddp`'s gradient sums in device memory, without host copies.
//!
//! Every rank joins one communicator: rank 0 makes NCCL's unique id and the host collective
//! (the engine that started the ranks, e.g. MPI) broadcasts it, as NCCL's own examples do.
//! The device is the rank's CUDA device; the NCCL rank is the global rank.
//!
//! burn-cuda does not expose its CUDA stream, so the order is kept on the host: burn's queue is
//! drained and synchronised, NCCL runs on a stream of its own, and that stream is synchronised
//! before burn touches the buffer again. NCCL is loaded at run time (cudarc's dynamic loading):
//! a build needs no CUDA, and a missing library is a clear error, never a panic.

use std::any::Any;
use std::sync::Arc;

use anyhow::Context;
use burn::tensor::backend::{Backend, BackendTypes};
use burn_cubecl::CubeBackend;
use burn_cuda::{Cuda, CudaDevice};
use cubecl_cuda::CudaRuntime;
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::{Comm, Id, ReduceOp};
use ember_core::collective::Collective;
use ember_core::plugins::device_reduce::DeviceCollective;

/// The name it is selected by: `--trainer.plugins=[nccl]`, and `ddp`'s default on cuda.
pub const NCCL: &str = "nccl";

/// The cube backend under burn-cuda's fusion, which resolves a fused tensor to its buffer.
type Cube = CubeBackend<CudaRuntime, f32, i32, u8>;

/// One rank's NCCL communicator, on its CUDA device.
pub struct NcclCollective {
    comm: Comm,
    stream: Arc<CudaStream>,
    device: CudaDevice,
}

impl NcclCollective {
    /// Joins the communicator of the `host` collective's ranks on CUDA device `device`.
    /// Blocks until every rank has joined.
    pub fn new(host: &dyn Collective, device: &CudaDevice) -> anyhow::Result<Self> {
        ensure_loadable()?;
        let context = CudaContext::new(device.index)
            .map_err(|e| anyhow::anyhow!("NCCL: opening CUDA device {}: {e}", device.index))?;
        let stream = context
            .new_stream()
            .map_err(|e| anyhow::anyhow!("NCCL: creating a CUDA stream: {e}"))?;
        let mut id = Vec::new();
        if host.rank() == 0 {
            let made = Id::new().map_err(|e| anyhow::anyhow!("ncclGetUniqueId failed: {e:?}"))?;
            id = made.internal().iter().map(|&c| c as u8).collect();
        }
        host.broadcast(&mut id, 0)
            .context("sharing NCCL's unique id over the host collective")?;
        let internal: [std::ffi::c_char; 128] = std::array::from_fn(|i| id[i] as std::ffi::c_char);
        anyhow::ensure!(
            id.len() == internal.len(),
            "rank 0 sent an NCCL unique id of {} bytes; NCCL's has {}",
            id.len(),
            internal.len()
        );
        let comm = Comm::from_rank(
            Arc::clone(&stream),
            host.rank(),
            host.world_size(),
            Id::uninit(internal),
        )
        .map_err(|e| {
            anyhow::anyhow!(
                "ncclCommInitRank (rank {} of {}, CUDA device {}) failed: {e:?}",
                host.rank(),
                host.world_size(),
                device.index
            )
        })?;
        Ok(Self {
            comm,
            stream,
            device: device.clone(),
        })
    }

    /// The communicator, for a caller that reduces cudarc buffers of its own.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// Runs `work` with the CUDA address and element count of `tensor`'s buffer, between
    /// burn's kernels and burn's next use of it: burn's queue is drained and synchronised
    /// before, this communicator's stream after.
    pub fn with_buffer<R>(
        &self,
        tensor: &<Cuda as BackendTypes>::FloatTensorPrimitive,
        work: impl FnOnce(u64, usize) -> R,
    ) -> anyhow::Result<R> {
        let len = tensor.shape.num_elements();
        let cube = tensor.client.resolve_tensor_float::<Cube>(tensor.clone());
        <Cuda as Backend>::sync(&self.device)
            .map_err(|e| anyhow::anyhow!("waiting for burn's kernels before NCCL: {e:?}"))?;
        anyhow::ensure!(
            cube.is_contiguous(),
            "NCCL works on contiguous buffers; this one is strided"
        );
        // Held until NCCL's stream is synchronised: a released buffer could be handed to
        // burn's next kernel while NCCL still uses it.
        let resource = cube
            .client
            .get_resource(cube.handle.clone())
            .map_err(|e| anyhow::anyhow!("reaching burn's CUDA buffer: {e:?}"))?;
        let out = work(resource.resource().ptr, len);
        let synced = self.stream.synchronize();
        drop(resource);
        synced.map_err(|e| anyhow::anyhow!("waiting for NCCL's stream: {e}"))?;
        Ok(out)
    }

    /// Sums the buffer of `tensor` over the ranks, in place, as `T` (f32 or f64).
    fn sum_in_place<T: cudarc::nccl::NcclType>(
        &self,
        tensor: &<Cuda as BackendTypes>::FloatTensorPrimitive,
    ) -> anyhow::Result<()> {
        let reduced = self.with_buffer(tensor, |ptr, len| {
            // SAFETY: `ptr` is the start of `len` elements of `T` that burn allocated on this
            // device and keeps alive for the call; the slice is leaked, never freed, so the
            // memory stays burn's.
            let mut slice = unsafe { self.stream.upgrade_device_ptr::<T>(ptr, len) };
            let reduced = self.comm.all_reduce_in_place(&mut slice, &ReduceOp::Sum);
            slice.leak();
            reduced.map_err(|e| anyhow::anyhow!("ncclAllReduce of {len} elements failed: {e:?}"))
        })?;
        reduced.map(|_| ())
    }
}

impl DeviceCollective for NcclCollective {
    fn name(&self) -> &str {
        NCCL
    }

    fn all_reduce_sum(&self, flat: &mut dyn Any) -> anyhow::Result<()> {
        let tensor = flat
            .downcast_ref::<<Cuda as BackendTypes>::FloatTensorPrimitive>()
            .context("NCCL was handed a tensor that is not burn-cuda's")?;
        match tensor.dtype {
            burn::tensor::DType::F32 => self.sum_in_place::<f32>(tensor),
            burn::tensor::DType::F64 => self.sum_in_place::<f64>(tensor),
            other => anyhow::bail!("NCCL sums gradients in f32 or f64, not {other:?}"),
        }
    }
}

/// Fails with what to do when no NCCL library can be loaded (cudarc would panic at first use).
pub fn ensure_loadable() -> anyhow::Result<()> {
    // SAFETY: only tries to open the library; no symbol is called.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Ok(());
    }
    let tried = cudarc::get_lib_name_candidates("nccl").join(", ");
    anyhow::bail!(
        "NCCL could not be loaded: none of {tried} is on the library path. pip's nvidia-nccl-cu12 \
         or -cu13 wheel ships only libnccl.so.2: put a libnccl.so link to it in a directory on \
         LD_LIBRARY_PATH (scripts/gpu-check.sh does), or reduce through the host collective with \
         --trainer.plugins=[mpi]"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_core::collective::SingleProcess;

    #[test]
    fn joining_without_nccl_or_a_gpu_is_a_clear_error() {
        let made = NcclCollective::new(&SingleProcess, &CudaDevice::new(0));
        match (ensure_loadable(), crate::cuda_device_count()) {
            (Err(_), _) => {
                let message = format!("{:#}", made.err().expect("no NCCL, no communicator"));
                assert!(message.contains("libnccl.so"), "{message}");
                assert!(message.contains("--trainer.plugins=[mpi]"), "{message}");
            }
            (Ok(()), 0) => assert!(made.is_err(), "NCCL without a GPU cannot join"),
            (Ok(()), _) => {
                made.expect("one rank joins its own communicator");
            }
        }
    }

    /// On a GPU with NCCL: one rank's communicator reads burn's buffer where burn keeps it
    /// (an out-of-place sum into a cudarc buffer equals burn's values), sums in place,
    /// broadcasts, and is destroyed.
    #[test]
    fn one_rank_reaches_burns_buffers() {
        if ensure_loadable().is_err() || crate::cuda_device_count() == 0 {
            eprintln!("skip: needs a CUDA GPU and NCCL (run by scripts/gpu-check.sh)");
            return;
        }
        let device = CudaDevice::new(0);
        let nccl = NcclCollective::new(&SingleProcess, &device).unwrap();
        let values: Vec<f32> = (0..(1 << 20))
            .map(|i| (i % 977) as f32 * 0.25 - 3.0)
            .collect();
        let tensor = burn::tensor::Tensor::<Cuda, 1>::from_floats(values.as_slice(), &device)
            .mul_scalar(1.0);
        let mut primitive = tensor.into_primitive().tensor();
        let copied = nccl
            .with_buffer(&primitive, |ptr, len| {
                let mut out = nccl.stream.alloc_zeros::<f32>(len).unwrap();
                // SAFETY: as in sum_in_place; leaked, so burn's buffer is not freed.
                let src = unsafe { nccl.stream.upgrade_device_ptr::<f32>(ptr, len) };
                nccl.comm
                    .all_reduce(&src, &mut out, &ReduceOp::Sum)
                    .unwrap();
                src.leak();
                nccl.comm.broadcast_in_place(&mut out, 0).unwrap();
                out
            })
            .unwrap();
        assert_eq!(nccl.stream.clone_dtoh(&copied).unwrap(), values);
        nccl.all_reduce_sum(&mut primitive).unwrap();
        let summed = burn::tensor::Tensor::<Cuda, 1>::from_primitive(
            burn::tensor::TensorPrimitive::Float(primitive),
        );
        assert_eq!(summed.into_data().to_vec::<f32>().unwrap(), values);
        drop(nccl);
    }
}
