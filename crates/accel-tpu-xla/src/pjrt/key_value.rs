//! A [`KeyValueStore`] as the callbacks `PJRT_Client_Create` takes (`kv_get`, `kv_try_get`,
//! `kv_put`): how a plugin's distributed runtime swaps its bootstrap data (each process's
//! devices, collective ids) between the processes of a run.

use std::alloc::{Layout, alloc, dealloc};
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use ember_core::collective::KeyValueStore;

use super::sys;

/// The store a client's callbacks reach: boxed, so that a thin pointer to it is their user
/// argument, and kept by the client for as long as the plugin may call them.
pub(crate) struct StoreCallbacks {
    store: Arc<dyn KeyValueStore>,
}

impl StoreCallbacks {
    /// Callbacks into `store`.
    pub(crate) fn new(store: Arc<dyn KeyValueStore>) -> Box<Self> {
        Box::new(Self { store })
    }

    /// Points `args`' callbacks at this store, which must not move while the plugin may call
    /// them (it stays in its box, kept by the client).
    pub(crate) fn install(&self, args: &mut sys::PJRT_Client_Create_Args) {
        let user: *mut std::ffi::c_void = ptr::from_ref::<Self>(self).cast_mut().cast();
        args.kv_get_callback = Some(kv_get);
        args.kv_get_user_arg = user;
        args.kv_try_get_callback = Some(kv_try_get);
        args.kv_try_get_user_arg = user;
        args.kv_put_callback = Some(kv_put);
        args.kv_put_user_arg = user;
    }
}

/// A PJRT error made by the plugin's `callback_error`.
///
/// # Safety
/// `callback_error` is the pointer the plugin passed in the callback's args.
unsafe fn error(
    callback_error: *mut sys::PJRT_CallbackError,
    code: sys::PJRT_Error_Code,
    message: &str,
) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin passes a valid pointer to its error constructor.
    match unsafe { callback_error.as_ref() }.copied().flatten() {
        // SAFETY: the constructor copies the message before returning.
        Some(make) => unsafe { make(code, message.as_ptr().cast(), message.len()) },
        None => ptr::null_mut(),
    }
}

/// The key a callback names, as text; else the INVALID_ARGUMENT error to return.
///
/// # Safety
/// `key` points to `len` bytes; `callback_error` is the plugin's error constructor.
unsafe fn key<'a>(
    key: *const c_char,
    len: usize,
    callback_error: *mut sys::PJRT_CallbackError,
) -> Result<&'a str, *mut sys::PJRT_Error> {
    // SAFETY: the plugin passes a pointer to `len` bytes that outlive the call.
    let bytes = unsafe { std::slice::from_raw_parts(key.cast::<u8>(), len) };
    std::str::from_utf8(bytes).map_err(|_| {
        let message = format!("key-value store: a key that is not UTF-8: {bytes:?}");
        let code = sys::PJRT_Error_Code_PJRT_Error_Code_INVALID_ARGUMENT;
        // SAFETY: the plugin's error constructor.
        unsafe { error(callback_error, code, &message) }
    })
}

/// Asks the store, turning a panic in it into an error (none may cross into the plugin).
fn ask<T>(what: impl FnOnce() -> anyhow::Result<T>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(what)) {
        Ok(Ok(found)) => Ok(found),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => Err("the key-value store panicked".into()),
    }
}

/// Bytes before a value that hold its length, so that [`free_value`] can free it from the
/// pointer alone (the plugin's deleter passes nothing else).
const HEADER: usize = size_of::<usize>();

/// `value` copied into memory [`free_value`] frees.
fn give_value(value: &[u8]) -> *mut c_char {
    let layout = value_layout(value.len());
    // SAFETY: the layout is never zero-sized (it holds the header).
    let base = unsafe { alloc(layout) };
    if base.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `base` holds HEADER + value.len() bytes, aligned for usize.
    unsafe {
        base.cast::<usize>().write(value.len());
        ptr::copy_nonoverlapping(value.as_ptr(), base.add(HEADER), value.len());
        base.add(HEADER).cast()
    }
}

/// Frees a value [`give_value`] made: the deleter a get hands the plugin.
unsafe extern "C" fn free_value(value: *mut c_char) {
    if value.is_null() {
        return;
    }
    // SAFETY: `value` came from `give_value`, HEADER bytes after the allocation's start, which
    // holds the length.
    unsafe {
        let base = value.cast::<u8>().sub(HEADER);
        let len = base.cast::<usize>().read();
        dealloc(base, value_layout(len));
    }
}

fn value_layout(len: usize) -> Layout {
    Layout::from_size_align(HEADER + len, align_of::<usize>()).expect("a value's layout")
}

/// A get's out-fields: the value, its length, and how the plugin frees it.
struct GetOut<'a> {
    value: &'a mut *mut c_char,
    size: &'a mut usize,
    deleter: &'a mut sys::PJRT_KeyValueGetCallback_ValueDeleter,
}

/// Answers a get: a found value handed over through `out`, a missing key as an error of
/// code `absent` saying `why`, a failed store as UNAVAILABLE.
///
/// # Safety
/// `callback_error` is the pointer the plugin passed in the callback's args.
unsafe fn answer_get(
    found: Result<Option<Vec<u8>>, String>,
    out: GetOut<'_>,
    absent: sys::PJRT_Error_Code,
    why: impl FnOnce() -> String,
    callback_error: *mut sys::PJRT_CallbackError,
) -> *mut sys::PJRT_Error {
    let (code, message) = match found {
        Ok(Some(value)) => {
            *out.size = value.len();
            *out.value = give_value(&value);
            *out.deleter = Some(free_value);
            return ptr::null_mut();
        }
        Ok(None) => (absent, why()),
        Err(e) => (sys::PJRT_Error_Code_PJRT_Error_Code_UNAVAILABLE, e),
    };
    // SAFETY: the plugin's error constructor.
    unsafe { error(callback_error, code, &message) }
}

/// `kv_get`: waits up to the timeout for the key.
unsafe extern "C" fn kv_get(args: *mut sys::PJRT_KeyValueGetCallback_Args) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin passes valid args whose user argument is our StoreCallbacks.
    let args = unsafe { &mut *args };
    let callbacks = unsafe { &*args.user_arg.cast::<StoreCallbacks>() };
    let timeout = Duration::from_millis(args.timeout_in_ms.max(0) as u64);
    // SAFETY: the key's pointer and length and the error constructor come from the plugin.
    let key = match unsafe { key(args.key, args.key_size, args.callback_error) } {
        Ok(key) => key,
        Err(e) => return e,
    };
    let found = ask(|| callbacks.store.get(key, timeout));
    let why = || format!("key-value store: no process put {key:?} within {timeout:?}");
    let out = GetOut {
        value: &mut args.value,
        size: &mut args.value_size,
        deleter: &mut args.value_deleter_callback,
    };
    let absent = sys::PJRT_Error_Code_PJRT_Error_Code_DEADLINE_EXCEEDED;
    // SAFETY: the plugin's error constructor.
    unsafe { answer_get(found, out, absent, why, args.callback_error) }
}

/// `kv_try_get`: the key's value if it is there, else NOT_FOUND.
unsafe extern "C" fn kv_try_get(
    args: *mut sys::PJRT_KeyValueTryGetCallback_Args,
) -> *mut sys::PJRT_Error {
    // SAFETY: as in kv_get.
    let args = unsafe { &mut *args };
    let callbacks = unsafe { &*args.user_arg.cast::<StoreCallbacks>() };
    // SAFETY: the key's pointer and length and the error constructor come from the plugin.
    let key = match unsafe { key(args.key, args.key_size, args.callback_error) } {
        Ok(key) => key,
        Err(e) => return e,
    };
    let found = ask(|| callbacks.store.try_get(key));
    let why = || format!("key-value store: no process has put {key:?}");
    let out = GetOut {
        value: &mut args.value,
        size: &mut args.value_size,
        deleter: &mut args.value_deleter_callback,
    };
    let absent = sys::PJRT_Error_Code_PJRT_Error_Code_NOT_FOUND;
    // SAFETY: the plugin's error constructor.
    unsafe { answer_get(found, out, absent, why, args.callback_error) }
}

/// `kv_put`: sets the key for every process.
unsafe extern "C" fn kv_put(args: *mut sys::PJRT_KeyValuePutCallback_Args) -> *mut sys::PJRT_Error {
    // SAFETY: as in kv_get.
    let args = unsafe { &mut *args };
    let callbacks = unsafe { &*args.user_arg.cast::<StoreCallbacks>() };
    // SAFETY: the value's pointer and length come from the plugin.
    let value = unsafe { std::slice::from_raw_parts(args.value.cast::<u8>(), args.value_size) };
    // SAFETY: the key's pointer and length and the error constructor come from the plugin.
    let key = match unsafe { key(args.key, args.key_size, args.callback_error) } {
        Ok(key) => key,
        Err(e) => return e,
    };
    match ask(|| callbacks.store.put(key, value)) {
        Ok(()) => ptr::null_mut(),
        // SAFETY: the plugin's error constructor.
        Err(e) => unsafe {
            let code = sys::PJRT_Error_Code_PJRT_Error_Code_UNAVAILABLE;
            error(args.callback_error, code, &e)
        },
    }
}

#[cfg(test)]
mod tests;
