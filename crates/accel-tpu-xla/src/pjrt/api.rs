//! A loaded PJRT plugin: its function table and the error type every call returns.

use std::ffi::c_char;
use std::path::{Path, PathBuf};

use super::sys;

/// A failed PJRT call: which call, and the plugin's own message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("PJRT {call} failed: {message}")]
pub struct PjrtError {
    /// The C API function that failed, e.g. `PJRT_Client_Compile`.
    pub call: &'static str,
    /// What the plugin said.
    pub message: String,
}

/// The result of a PJRT call.
pub type Result<T> = std::result::Result<T, PjrtError>;

/// A plugin's `PJRT_Api` table, loaded once and kept for the life of the process (plugins
/// are never unloaded: their threads and statics outlive any one client).
pub struct Api {
    raw: &'static sys::PJRT_Api,
    path: PathBuf,
}

// SAFETY: the table is immutable after `GetPjrtApi`, and the C API is thread-safe.
unsafe impl Send for Api {}
// SAFETY: as above.
unsafe impl Sync for Api {}

/// Calls one PJRT function with its args struct and turns a returned error into a [`PjrtError`].
macro_rules! pjrt_call {
    ($api:expr, $f:ident, $args:expr) => {{
        let api: &$crate::pjrt::api::Api = $api;
        match api.raw().$f {
            // SAFETY: `$args` is a fully initialised args struct of the version we were built
            // against (struct_size set), living across the call.
            Some(f) => api.check(stringify!($f), unsafe { f($args) }),
            None => Err(api.missing(stringify!($f))),
        }
    }};
}
pub(crate) use pjrt_call;

impl Api {
    /// Loads the plugin at `path`, checks its C API version and initialises it.
    pub fn load(path: &Path) -> Result<&'static Api> {
        let fail = |message: String| PjrtError {
            call: "GetPjrtApi",
            message,
        };
        // SAFETY: loading a shared library runs its initialisers; a PJRT plugin is meant to be
        // loaded this way.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| fail(format!("cannot load {}: {e}", path.display())))?;
        // SAFETY: every PJRT plugin exports `const PJRT_Api* GetPjrtApi(void)`.
        let get: libloading::Symbol<unsafe extern "C" fn() -> *const sys::PJRT_Api> =
            unsafe { lib.get(b"GetPjrtApi\0") }
                .map_err(|e| fail(format!("{} is not a PJRT plugin: {e}", path.display())))?;
        // SAFETY: as above; the returned table lives as long as the library, which is leaked.
        let raw = unsafe { get() };
        if raw.is_null() {
            return Err(fail(format!("{} returned no API table", path.display())));
        }
        std::mem::forget(lib);
        // SAFETY: non-null and valid for the life of the process.
        let raw: &'static sys::PJRT_Api = unsafe { &*raw };
        let version = raw.pjrt_api_version;
        if (version.major_version as u32) != sys::PJRT_API_MAJOR
            || (version.minor_version as u32) < sys::PJRT_API_MINOR
        {
            return Err(fail(format!(
                "{} speaks PJRT C API {}.{}; ember needs {}.{} or a later minor version",
                path.display(),
                version.major_version,
                version.minor_version,
                sys::PJRT_API_MAJOR,
                sys::PJRT_API_MINOR
            )));
        }
        let api: &'static Api = Box::leak(Box::new(Api {
            raw,
            path: path.to_owned(),
        }));
        let mut args = sys::PJRT_Plugin_Initialize_Args {
            struct_size: sys::PJRT_Plugin_Initialize_Args_STRUCT_SIZE as usize,
            ..Default::default()
        };
        pjrt_call!(api, PJRT_Plugin_Initialize, &mut args)?;
        Ok(api)
    }

    /// The plugin file this table came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn raw(&self) -> &sys::PJRT_Api {
        self.raw
    }

    pub(crate) fn missing(&self, call: &'static str) -> PjrtError {
        PjrtError {
            call,
            message: format!("{} does not implement it", self.path.display()),
        }
    }

    /// Turns a returned `PJRT_Error*` into a result, destroying the error.
    pub(crate) fn check(&self, call: &'static str, error: *mut sys::PJRT_Error) -> Result<()> {
        if error.is_null() {
            return Ok(());
        }
        let mut args = sys::PJRT_Error_Message_Args {
            struct_size: sys::PJRT_Error_Message_Args_STRUCT_SIZE as usize,
            error,
            ..Default::default()
        };
        let message = match self.raw.PJRT_Error_Message {
            Some(f) => {
                // SAFETY: `error` came from the plugin and is still alive.
                unsafe { f(&mut args) };
                // SAFETY: the plugin returns a pointer and length into the error's storage.
                unsafe { text(args.message, args.message_size) }
            }
            None => "(the plugin gives no message)".to_owned(),
        };
        let mut destroy = sys::PJRT_Error_Destroy_Args {
            struct_size: sys::PJRT_Error_Destroy_Args_STRUCT_SIZE as usize,
            error,
            ..Default::default()
        };
        if let Some(f) = self.raw.PJRT_Error_Destroy {
            // SAFETY: destroyed once, after its message was copied.
            unsafe { f(&mut destroy) };
        }
        Err(PjrtError { call, message })
    }
}

/// Copies a (pointer, length) string the plugin returned.
///
/// # Safety
/// `ptr` must point at `len` readable bytes (or be null).
pub(crate) unsafe fn text(ptr: *const c_char, len: usize) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    String::from_utf8_lossy(bytes).into_owned()
}
