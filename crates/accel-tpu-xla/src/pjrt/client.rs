//! A PJRT client and what it makes: device buffers and compiled executables.

use std::ptr;
use std::sync::Arc;

use ember_core::collective::KeyValueStore;

use super::api::{Api, PjrtError, Result, pjrt_call, text};
use super::executable::{Executable, Layout, compile_options};
use super::key_value::StoreCallbacks;
use super::sys;

/// The element types ember moves through PJRT buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// `i1` in StableHLO, one byte per element on the host.
    Pred,
    /// 8-bit unsigned.
    U8,
    /// 32-bit signed.
    S32,
    /// 64-bit signed.
    S64,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single.
    F32,
    /// IEEE double.
    F64,
}

impl ElementType {
    fn raw(self) -> sys::PJRT_Buffer_Type {
        match self {
            Self::Pred => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_PRED,
            Self::U8 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_U8,
            Self::S32 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_S32,
            Self::S64 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_S64,
            Self::F16 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_F16,
            Self::Bf16 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_BF16,
            Self::F32 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_F32,
            Self::F64 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_F64,
        }
    }

    /// Bytes per element on the host.
    pub fn size(self) -> usize {
        match self {
            Self::Pred | Self::U8 => 1,
            Self::F16 | Self::Bf16 => 2,
            Self::S32 | Self::F32 => 4,
            Self::S64 | Self::F64 => 8,
        }
    }
}

/// A PJRT client: the plugin's view of its devices, owner of buffers and executables.
pub struct Client {
    api: &'static Api,
    raw: *mut sys::PJRT_Client,
    devices: Vec<*mut sys::PJRT_Device>,
    platform: String,
    /// The key-value store the plugin's callbacks reach, kept until the client is destroyed.
    _store: Option<Box<StoreCallbacks>>,
}

// SAFETY: PJRT clients, buffers and executables may be used from any thread.
unsafe impl Send for Client {}
// SAFETY: as above.
unsafe impl Sync for Client {}

/// A value of a client creation option ([`Client::with_options`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OptionValue {
    /// An integer, e.g. the CPU plugin's `cpu_device_count`.
    Int(i64),
    /// A flag, e.g. the CPU plugin's `asynchronous`.
    Bool(bool),
}

impl Client {
    /// Creates a client of `api`'s plugin with no options.
    pub fn new(api: &'static Api) -> Result<Client> {
        Self::with_options(api, &[])
    }

    /// Creates a client of `api`'s plugin with named creation options (XLA's CPU plugin:
    /// `cpu_device_count`). What a plugin does with a name it does not know is its own: newer
    /// builds refuse it, `xla-cpu-pjrt` 0.0.1 ignores it.
    pub fn with_options(api: &'static Api, options: &[(&str, OptionValue)]) -> Result<Client> {
        Self::create(api, options, None)
    }

    /// Creates a client of `api`'s plugin that bootstraps through `store`, shared by every
    /// process of a run: its distributed runtime swaps each process's devices (and later
    /// collective ids) there. The options say which process this is, in the plugin's names
    /// (XLA's GPU plugin: `node_id`, `num_nodes`). A plugin without a distributed runtime
    /// never calls the store.
    pub fn with_store(
        api: &'static Api,
        options: &[(&str, OptionValue)],
        store: Arc<dyn KeyValueStore>,
    ) -> Result<Client> {
        Self::create(api, options, Some(StoreCallbacks::new(store)))
    }

    fn create(
        api: &'static Api,
        options: &[(&str, OptionValue)],
        store: Option<Box<StoreCallbacks>>,
    ) -> Result<Client> {
        let named: Vec<sys::PJRT_NamedValue> = options
            .iter()
            .map(|(name, value)| {
                let mut named = sys::PJRT_NamedValue {
                    struct_size: sys::PJRT_NamedValue_STRUCT_SIZE as usize,
                    name: name.as_ptr().cast(),
                    name_size: name.len(),
                    value_size: 1,
                    ..Default::default()
                };
                match *value {
                    OptionValue::Int(v) => {
                        named.type_ = sys::PJRT_NamedValue_Type_PJRT_NamedValue_kInt64;
                        named.__bindgen_anon_1.int64_value = v;
                    }
                    OptionValue::Bool(v) => {
                        named.type_ = sys::PJRT_NamedValue_Type_PJRT_NamedValue_kBool;
                        named.__bindgen_anon_1.bool_value = v;
                    }
                }
                named
            })
            .collect();
        let mut args = sys::PJRT_Client_Create_Args {
            struct_size: sys::PJRT_Client_Create_Args_STRUCT_SIZE as usize,
            create_options: named.as_ptr(),
            num_options: named.len(),
            ..Default::default()
        };
        if let Some(store) = &store {
            store.install(&mut args);
        }
        pjrt_call!(api, PJRT_Client_Create, &mut args)?;
        let mut client = Client {
            api,
            raw: args.client,
            devices: Vec::new(),
            platform: String::new(),
            _store: store,
        };
        let mut devices = sys::PJRT_Client_AddressableDevices_Args {
            struct_size: sys::PJRT_Client_AddressableDevices_Args_STRUCT_SIZE as usize,
            client: client.raw,
            ..Default::default()
        };
        pjrt_call!(api, PJRT_Client_AddressableDevices, &mut devices)?;
        if devices.num_addressable_devices > 0 {
            // SAFETY: the plugin returns an array of that many device pointers, owned by the client.
            client.devices = unsafe {
                std::slice::from_raw_parts(
                    devices.addressable_devices,
                    devices.num_addressable_devices,
                )
            }
            .to_vec();
        }
        let mut platform = sys::PJRT_Client_PlatformName_Args {
            struct_size: sys::PJRT_Client_PlatformName_Args_STRUCT_SIZE as usize,
            client: client.raw,
            ..Default::default()
        };
        pjrt_call!(api, PJRT_Client_PlatformName, &mut platform)?;
        // SAFETY: pointer and length into the client's storage.
        client.platform = unsafe { text(platform.platform_name, platform.platform_name_size) };
        Ok(client)
    }

    /// The platform's name, e.g. `cpu`, `cuda`, `tpu`.
    pub fn platform(&self) -> &str {
        &self.platform
    }

    /// How many devices this process can address.
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// How many devices the client sees in all: on a client bootstrapped with other
    /// processes ([`Client::with_store`]), theirs too.
    pub fn global_device_count(&self) -> Result<usize> {
        let mut args = sys::PJRT_Client_Devices_Args {
            struct_size: sys::PJRT_Client_Devices_Args_STRUCT_SIZE as usize,
            client: self.raw,
            ..Default::default()
        };
        pjrt_call!(self.api, PJRT_Client_Devices, &mut args)?;
        Ok(args.num_devices)
    }

    fn device(&self, index: usize) -> Result<*mut sys::PJRT_Device> {
        self.devices.get(index).copied().ok_or_else(|| PjrtError {
            call: "PJRT_Client_AddressableDevices",
            message: format!(
                "device {index} does not exist; this client has {} device(s)",
                self.devices.len()
            ),
        })
    }

    /// Copies `bytes` (row-major, `ty` elements, shape `dims`) into a new buffer on device
    /// `device`. The bytes are copied before this returns.
    pub fn upload(
        &self,
        bytes: &[u8],
        ty: ElementType,
        dims: &[i64],
        device: usize,
    ) -> Result<Buffer> {
        let elements: i64 = dims.iter().product();
        assert_eq!(
            bytes.len(),
            elements as usize * ty.size(),
            "upload: {} bytes for {dims:?} of {ty:?}",
            bytes.len()
        );
        let mut args = sys::PJRT_Client_BufferFromHostBuffer_Args {
            struct_size: sys::PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE as usize,
            client: self.raw,
            data: bytes.as_ptr().cast(),
            type_: ty.raw(),
            dims: dims.as_ptr(),
            num_dims: dims.len(),
            host_buffer_semantics:
                sys::PJRT_HostBufferSemantics_PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
            device: self.device(device)?,
            ..Default::default()
        };
        pjrt_call!(self.api, PJRT_Client_BufferFromHostBuffer, &mut args)?;
        Event::new(self.api, args.done_with_host_buffer).wait()?;
        Ok(Buffer {
            api: self.api,
            raw: args.buffer,
        })
    }

    /// Compiles a StableHLO module given as MLIR text into an executable that can run on any
    /// of this client's devices.
    pub fn compile(&self, mlir: &str) -> Result<Executable> {
        self.compile_with(mlir, &compile_options(Layout::Portable))
    }

    /// Compiles a StableHLO module for `replicas` replicas, replica `i` on device `i`: one
    /// program that [`execute_replicated`](Self::execute_replicated) runs on every replica at
    /// once, whose collectives (`stablehlo.all_reduce` over `replica_groups`) join them.
    pub fn compile_replicated(&self, mlir: &str, replicas: usize) -> Result<Executable> {
        self.compile_with(mlir, &compile_options(Layout::Replicas(replicas)))
    }

    /// Compiles a StableHLO module for `partitions` devices with XLA's SPMD partitioner: one
    /// program over arrays laid out by the module's `mhlo.sharding` annotations, partition `i`
    /// on device `i`. The partitioner splits the work of sharded values over the devices and
    /// adds the collectives that joins them; [`execute_replicated`](Self::execute_replicated)
    /// runs it with each device's arguments.
    pub fn compile_partitioned(&self, mlir: &str, partitions: usize) -> Result<Executable> {
        self.compile_with(mlir, &compile_options(Layout::Partitions(partitions)))
    }

    fn compile_with(&self, mlir: &str, options: &[u8]) -> Result<Executable> {
        let format = b"mlir";
        let mut program = sys::PJRT_Program {
            struct_size: sys::PJRT_Program_STRUCT_SIZE as usize,
            code: mlir.as_ptr().cast_mut().cast(),
            code_size: mlir.len(),
            format: format.as_ptr().cast(),
            format_size: format.len(),
            ..Default::default()
        };
        let mut args = sys::PJRT_Client_Compile_Args {
            struct_size: sys::PJRT_Client_Compile_Args_STRUCT_SIZE as usize,
            client: self.raw,
            program: &mut program,
            compile_options: options.as_ptr().cast(),
            compile_options_size: options.len(),
            ..Default::default()
        };
        pjrt_call!(self.api, PJRT_Client_Compile, &mut args)?;
        let mut executable = Executable {
            api: self.api,
            raw: args.executable,
            outputs: 0,
        };
        executable.outputs = executable.inspect(|api, compiled| {
            let mut outputs = sys::PJRT_Executable_NumOutputs_Args {
                struct_size: sys::PJRT_Executable_NumOutputs_Args_STRUCT_SIZE as usize,
                executable: compiled,
                ..Default::default()
            };
            pjrt_call!(api, PJRT_Executable_NumOutputs, &mut outputs)?;
            Ok(outputs.num_outputs)
        })?;
        Ok(executable)
    }

    /// Runs `executable` on device `device` with `args` (which must live there) and waits for
    /// it; returns its outputs in order.
    pub fn execute(
        &self,
        executable: &Executable,
        args: &[&Buffer],
        device: usize,
    ) -> Result<Vec<Buffer>> {
        let (outputs, running) = self.start(executable, args, device)?;
        running.wait()?;
        Ok(outputs)
    }

    /// Starts `executable` on device `device` with `args` (which must live there), without
    /// waiting for it: its outputs in order, usable at once (a program that reads one waits
    /// for it on the device, a download waits on the host), and the run to wait on.
    pub fn start(
        &self,
        executable: &Executable,
        args: &[&Buffer],
        device: usize,
    ) -> Result<(Vec<Buffer>, Running)> {
        let (mut outputs, running) = self.launch(executable, &[args], self.device(device)?)?;
        Ok((outputs.remove(0), running))
    }

    /// Runs `executable`, compiled for `args.len()` replicas by
    /// [`compile_replicated`](Self::compile_replicated) (or partitions, by
    /// [`compile_partitioned`](Self::compile_partitioned)), with replica `i`'s arguments
    /// `args[i]` (which must live on device `i`), and waits for every replica; returns each
    /// replica's outputs in order.
    pub fn execute_replicated(
        &self,
        executable: &Executable,
        args: &[&[&Buffer]],
    ) -> Result<Vec<Vec<Buffer>>> {
        let (outputs, running) = self.start_replicated(executable, args)?;
        running.wait()?;
        Ok(outputs)
    }

    /// Starts `executable` on every replica as [`execute_replicated`](Self::execute_replicated)
    /// runs it, without waiting: each replica's outputs, and the run to wait on.
    pub fn start_replicated(
        &self,
        executable: &Executable,
        args: &[&[&Buffer]],
    ) -> Result<(Vec<Vec<Buffer>>, Running)> {
        self.launch(executable, args, ptr::null_mut())
    }

    /// One execution of `executable` on `args.len()` devices: on `device` when it is set (a
    /// portable executable), else on the replicas' devices.
    fn launch(
        &self,
        executable: &Executable,
        args: &[&[&Buffer]],
        device: *mut sys::PJRT_Device,
    ) -> Result<(Vec<Vec<Buffer>>, Running)> {
        let num_args = args.first().map_or(0, |a| a.len());
        assert!(
            args.iter().all(|a| a.len() == num_args),
            "execute: every replica takes the same number of arguments"
        );
        let inputs: Vec<Vec<*mut sys::PJRT_Buffer>> = args
            .iter()
            .map(|replica| replica.iter().map(|b| b.raw).collect())
            .collect();
        let input_lists: Vec<*const *mut sys::PJRT_Buffer> =
            inputs.iter().map(|i| i.as_ptr()).collect();
        let mut outputs = vec![vec![ptr::null_mut(); executable.outputs]; args.len()];
        let output_lists: Vec<*mut *mut sys::PJRT_Buffer> =
            outputs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        let mut done: Vec<*mut sys::PJRT_Event> = vec![ptr::null_mut(); args.len()];
        let mut options = sys::PJRT_ExecuteOptions {
            struct_size: sys::PJRT_ExecuteOptions_STRUCT_SIZE as usize,
            ..Default::default()
        };
        let mut call = sys::PJRT_LoadedExecutable_Execute_Args {
            struct_size: sys::PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE as usize,
            executable: executable.raw,
            options: &mut options,
            argument_lists: input_lists.as_ptr(),
            num_devices: args.len(),
            num_args,
            output_lists: output_lists.as_ptr(),
            device_complete_events: done.as_mut_ptr(),
            execute_device: device,
            ..Default::default()
        };
        pjrt_call!(self.api, PJRT_LoadedExecutable_Execute, &mut call)?;
        // Own the outputs and events first, so that they are freed even if a run failed.
        let outputs: Vec<Vec<Buffer>> = outputs
            .into_iter()
            .map(|replica| {
                (replica.into_iter())
                    .map(|raw| Buffer { api: self.api, raw })
                    .collect()
            })
            .collect();
        let events = done.into_iter().map(|e| Event::new(self.api, e)).collect();
        Ok((outputs, Running(events)))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let mut args = sys::PJRT_Client_Destroy_Args {
            struct_size: sys::PJRT_Client_Destroy_Args_STRUCT_SIZE as usize,
            client: self.raw,
            ..Default::default()
        };
        let _ = pjrt_call!(self.api, PJRT_Client_Destroy, &mut args);
    }
}

/// An array on one device.
pub struct Buffer {
    api: &'static Api,
    raw: *mut sys::PJRT_Buffer,
}

// SAFETY: see `Client`.
unsafe impl Send for Buffer {}
// SAFETY: see `Client`.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Copies the buffer into `dst`, which must hold exactly its bytes (row-major).
    pub fn download(&self, dst: &mut [u8]) -> Result<()> {
        let mut args = sys::PJRT_Buffer_ToHostBuffer_Args {
            struct_size: sys::PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE as usize,
            src: self.raw,
            dst: dst.as_mut_ptr().cast(),
            dst_size: dst.len(),
            ..Default::default()
        };
        pjrt_call!(self.api, PJRT_Buffer_ToHostBuffer, &mut args)?;
        Event::new(self.api, args.event).wait()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        let mut args = sys::PJRT_Buffer_Destroy_Args {
            struct_size: sys::PJRT_Buffer_Destroy_Args_STRUCT_SIZE as usize,
            buffer: self.raw,
            ..Default::default()
        };
        let _ = pjrt_call!(self.api, PJRT_Buffer_Destroy, &mut args);
    }
}

/// A started execution, on each of its devices: waiting on it returns when all have finished,
/// with the error of a run that failed. Dropping it does not wait (nor stop the run).
pub struct Running(Vec<Event>);

impl Running {
    /// Blocks until the execution has finished on every device.
    pub fn wait(self) -> Result<()> {
        for event in self.0 {
            event.wait()?;
        }
        Ok(())
    }
}

/// A PJRT event owned until waited on.
struct Event {
    api: &'static Api,
    raw: *mut sys::PJRT_Event,
}

// SAFETY: see `Client`; PJRT events may be awaited and destroyed from any thread.
unsafe impl Send for Event {}

impl Event {
    fn new(api: &'static Api, raw: *mut sys::PJRT_Event) -> Event {
        Event { api, raw }
    }

    /// Blocks until the event fires; returns the error it carries, if any. A null event (the
    /// plugin had nothing to wait for) is ready.
    fn wait(self) -> Result<()> {
        if self.raw.is_null() {
            return Ok(());
        }
        let mut args = sys::PJRT_Event_Await_Args {
            struct_size: sys::PJRT_Event_Await_Args_STRUCT_SIZE as usize,
            event: self.raw,
            ..Default::default()
        };
        pjrt_call!(self.api, PJRT_Event_Await, &mut args)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        let mut args = sys::PJRT_Event_Destroy_Args {
            struct_size: sys::PJRT_Event_Destroy_Args_STRUCT_SIZE as usize,
            event: self.raw,
            ..Default::default()
        };
        let _ = pjrt_call!(self.api, PJRT_Event_Destroy, &mut args);
    }
}
