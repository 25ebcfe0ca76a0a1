//! What a client compiles: executables, and the compile options that say how a program
//! spreads over devices.

use super::api::{Api, Result, pjrt_call};
use super::sys;

/// A compiled program, ready to run.
pub struct Executable {
    pub(super) api: &'static Api,
    pub(super) raw: *mut sys::PJRT_LoadedExecutable,
    pub(super) outputs: usize,
}

// SAFETY: see `Client`.
unsafe impl Send for Executable {}
// SAFETY: see `Client`.
unsafe impl Sync for Executable {}

impl Executable {
    /// How many buffers a run returns.
    pub fn output_count(&self) -> usize {
        self.outputs
    }

    /// The program as the plugin's compiler left it (a serialized `HloModuleProto`): what
    /// SPMD partitioning made of it, for tests and debugging.
    pub fn optimized_program(&self) -> Result<Vec<u8>> {
        self.inspect(|api, compiled| {
            let mut program = sys::PJRT_Program {
                struct_size: sys::PJRT_Program_STRUCT_SIZE as usize,
                ..Default::default()
            };
            let mut args = sys::PJRT_Executable_OptimizedProgram_Args {
                struct_size: sys::PJRT_Executable_OptimizedProgram_Args_STRUCT_SIZE as usize,
                executable: compiled,
                program: &mut program,
                ..Default::default()
            };
            // The first call, with no code buffer, sets the size; the second fills it.
            pjrt_call!(api, PJRT_Executable_OptimizedProgram, &mut args)?;
            let mut code = vec![0u8; program.code_size];
            program.code = code.as_mut_ptr().cast();
            pjrt_call!(api, PJRT_Executable_OptimizedProgram, &mut args)?;
            code.truncate(program.code_size);
            Ok(code)
        })
    }

    /// Calls `f` with the compiled executable behind this loaded one, released afterwards.
    pub(super) fn inspect<T>(
        &self,
        f: impl FnOnce(&'static Api, *mut sys::PJRT_Executable) -> Result<T>,
    ) -> Result<T> {
        let mut get = sys::PJRT_LoadedExecutable_GetExecutable_Args {
            struct_size: sys::PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE as usize,
            loaded_executable: self.raw,
            ..Default::default()
        };
        pjrt_call!(self.api, PJRT_LoadedExecutable_GetExecutable, &mut get)?;
        let result = f(self.api, get.executable);
        let mut destroy = sys::PJRT_Executable_Destroy_Args {
            struct_size: sys::PJRT_Executable_Destroy_Args_STRUCT_SIZE as usize,
            executable: get.executable,
            ..Default::default()
        };
        pjrt_call!(self.api, PJRT_Executable_Destroy, &mut destroy)?;
        result
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        let mut args = sys::PJRT_LoadedExecutable_Destroy_Args {
            struct_size: sys::PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE as usize,
            executable: self.raw,
            ..Default::default()
        };
        let _ = pjrt_call!(self.api, PJRT_LoadedExecutable_Destroy, &mut args);
    }
}

/// How a compiled program spreads over the client's devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// One device, chosen when it runs: one compile serves every device.
    Portable,
    /// This many copies of the program, replica `i` on device `i`.
    Replicas(usize),
    /// One program split by XLA's SPMD partitioner over this many devices, partition `i` on
    /// device `i`.
    Partitions(usize),
}

/// A serialized `CompileOptionsProto` for `layout`; several replicas or partitions get the
/// client's default assignment, replica (or partition) `i` on device `i`.
pub(super) fn compile_options(layout: Layout) -> Vec<u8> {
    let (replicas, partitions) = match layout {
        Layout::Portable => (1, 1),
        Layout::Replicas(n) => (n, 1),
        Layout::Partitions(n) => (1, n),
    };
    // executable_build_options (field 3); fields 4 and 5 of it: num_replicas, num_partitions.
    let mut build = vec![0x20];
    push_varint(&mut build, replicas as u64);
    build.push(0x28);
    push_varint(&mut build, partitions as u64);
    if let Layout::Partitions(_) = layout {
        // use_spmd_partitioning (field 6) = true.
        build.extend([0x30, 0x01]);
    }
    let mut options = vec![0x1a];
    push_varint(&mut options, build.len() as u64);
    options.extend(build);
    if layout == Layout::Portable {
        // compile_portable_executable (field 4) = true.
        options.extend([0x20, 0x01]);
    }
    options
}

/// Appends `value` as a protobuf varint.
fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::{Layout, compile_options};

    #[test]
    fn compile_options_encode_the_replica_and_partition_counts() {
        // One replica: portable, as every program ember compiled before replicas existed.
        let one = [0x1a, 0x04, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01];
        assert_eq!(compile_options(Layout::Portable), one);
        assert_eq!(
            compile_options(Layout::Replicas(4)),
            [0x1a, 0x04, 0x20, 0x04, 0x28, 0x01]
        );
        // 300 is the two-byte varint ac 02.
        assert_eq!(
            compile_options(Layout::Replicas(300)),
            [0x1a, 0x05, 0x20, 0xac, 0x02, 0x28, 0x01]
        );
        // SPMD: one replica of 4 partitions, use_spmd_partitioning set.
        assert_eq!(
            compile_options(Layout::Partitions(4)),
            [0x1a, 0x06, 0x20, 0x01, 0x28, 0x04, 0x30, 0x01]
        );
    }
}
