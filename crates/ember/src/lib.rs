//! ember: the PyTorch Lightning architecture for models written with burn.
//!
//! Depend on this crate with the features for the hardware you want (`cpu` is the default;
//! `cuda` and `wgpu` add those accelerators; `tch` adds LibTorch's `tch-cpu` and `tch-cuda`;
//! `tpu-xla` adds `xla`, XLA through a PJRT plugin; `mpi` adds multi-process runs on OpenMPI).
//! [`registry`] returns a registry with every enabled
//! accelerator; add your own with [`Registry::register`] and run jobs through [`Cli`].

pub use burn;
pub use ember_core::*;

#[cfg(feature = "cpu")]
pub use ember_accel_cpu as cpu;
#[cfg(feature = "cuda")]
pub use ember_accel_cuda as cuda;
#[cfg(feature = "tch")]
pub use ember_accel_tch as tch;
#[cfg(feature = "tpu-xla")]
pub use ember_accel_tpu_xla as xla;
#[cfg(feature = "wgpu")]
pub use ember_accel_wgpu as wgpu;
#[cfg(feature = "mpi")]
pub use ember_mpi as mpi;

/// A registry holding every accelerator this build enables (cpu, cuda, wgpu, tch-cpu,
/// tch-cuda and xla by feature), and
/// with the `mpi` feature the OpenMPI engine that multi-process (ddp) runs use.
pub fn registry<J: Job>() -> Registry<J> {
    let registry = Registry::new();
    #[cfg(feature = "mpi")]
    let registry = registry.with_engine(mpi::MpiEngine);
    #[cfg(feature = "cpu")]
    let registry = registry
        .register::<cpu::CpuAccelerator>()
        .expect("the built-in accelerators have distinct names");
    #[cfg(feature = "cuda")]
    let registry = registry
        .register::<cuda::CudaAccelerator>()
        .expect("the built-in accelerators have distinct names");
    #[cfg(feature = "wgpu")]
    let registry = registry
        .register::<wgpu::WgpuAccelerator>()
        .expect("the built-in accelerators have distinct names");
    #[cfg(feature = "tch")]
    let registry = registry
        .register::<tch::TchCpuAccelerator>()
        .and_then(|r| r.register::<tch::TchCudaAccelerator>())
        .expect("the built-in accelerators have distinct names");
    #[cfg(feature = "tpu-xla")]
    let registry = registry
        .register::<xla::XlaAccelerator>()
        .expect("the built-in accelerators have distinct names");
    registry
}

/// Runs application `A` from the command line with every accelerator this build enables and
/// what [`App::register`] adds (Lightning's `LightningCLI(Model, DataModule)`):
/// `fn main() -> ExitCode { ember::run::<MyApp>() }`. A registration the registry refuses (a
/// name taken twice) is reported and exits 2.
pub fn run<A: App>() -> std::process::ExitCode {
    match A::register(registry::<AppJob<A>>()) {
        Ok(registry) => Cli::for_app::<A>().run(&registry, AppJob::from),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
