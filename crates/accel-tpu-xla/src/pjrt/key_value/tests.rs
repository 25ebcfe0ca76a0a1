//! The callbacks called as a plugin calls them: through the function pointers `install` sets,
//! with the plugin's error constructor stood in for.

use std::cell::RefCell;
use std::ptr::NonNull;
use std::time::Instant;

use ember_core::collective::LocalKeyValueStore;

use super::*;

/// A store in this process's memory that refuses the key `refused` and panics at `panics`.
#[derive(Default)]
struct Memory(LocalKeyValueStore);

impl KeyValueStore for Memory {
    fn put(&self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        anyhow::ensure!(key != "refused", "this store refuses {key:?}");
        assert!(key != "panics", "a store that panics");
        self.0.put(key, value)
    }

    fn get(&self, key: &str, timeout: Duration) -> anyhow::Result<Option<Vec<u8>>> {
        self.0.get(key, timeout)
    }

    fn try_get(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        self.0.try_get(key)
    }
}

thread_local! {
    /// The errors the stand-in constructor made on this thread.
    static ERRORS: RefCell<Vec<(sys::PJRT_Error_Code, String)>> = const { RefCell::new(Vec::new()) };
}

/// The plugin's error constructor, stood in for: records the error, returns a token.
unsafe extern "C" fn record_error(
    code: sys::PJRT_Error_Code,
    message: *const c_char,
    len: usize,
) -> *mut sys::PJRT_Error {
    // SAFETY: the callbacks pass a message of `len` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(message.cast::<u8>(), len) };
    let message = String::from_utf8_lossy(bytes).into_owned();
    ERRORS.with(|e| e.borrow_mut().push((code, message)));
    NonNull::dangling().as_ptr()
}

/// The last error made on this thread.
fn last_error() -> (sys::PJRT_Error_Code, String) {
    ERRORS
        .with(|e| e.borrow().last().cloned())
        .expect("an error was made")
}

/// The callbacks `install` sets for a store, called as the plugin calls them.
struct Plugin {
    args: sys::PJRT_Client_Create_Args,
    _callbacks: Box<StoreCallbacks>,
}

static MAKE_ERROR: sys::PJRT_CallbackError = Some(record_error);

fn error_maker() -> *mut sys::PJRT_CallbackError {
    ptr::from_ref(&MAKE_ERROR).cast_mut()
}

impl Plugin {
    fn new(store: Arc<dyn KeyValueStore>) -> Self {
        let callbacks = StoreCallbacks::new(store);
        let mut args = sys::PJRT_Client_Create_Args::default();
        callbacks.install(&mut args);
        Self {
            args,
            _callbacks: callbacks,
        }
    }

    /// Puts; Err with the error's code and message.
    fn put(&self, key: &str, value: &[u8]) -> Result<(), (sys::PJRT_Error_Code, String)> {
        self.put_bytes(key.as_bytes(), value)
    }

    /// Puts under a key of any bytes.
    fn put_bytes(&self, key: &[u8], value: &[u8]) -> Result<(), (sys::PJRT_Error_Code, String)> {
        let mut args = sys::PJRT_KeyValuePutCallback_Args {
            struct_size: sys::PJRT_KeyValuePutCallback_Args_STRUCT_SIZE as usize,
            key: key.as_ptr().cast(),
            key_size: key.len(),
            value: value.as_ptr().cast(),
            value_size: value.len(),
            callback_error: error_maker(),
            user_arg: self.args.kv_put_user_arg,
            ..Default::default()
        };
        let put = self.args.kv_put_callback.expect("a put callback");
        // SAFETY: args set as a plugin sets them.
        match unsafe { put(&mut args) }.is_null() {
            true => Ok(()),
            false => Err(last_error()),
        }
    }

    /// Gets (with a timeout) or tries to; the value read and freed as the plugin does.
    fn get(
        &self,
        key: &str,
        timeout_ms: Option<i32>,
    ) -> Result<Vec<u8>, (sys::PJRT_Error_Code, String)> {
        let (err, value, len, deleter) = match timeout_ms {
            Some(timeout_in_ms) => {
                let mut args = sys::PJRT_KeyValueGetCallback_Args {
                    struct_size: sys::PJRT_KeyValueGetCallback_Args_STRUCT_SIZE as usize,
                    key: key.as_ptr().cast(),
                    key_size: key.len(),
                    timeout_in_ms,
                    callback_error: error_maker(),
                    user_arg: self.args.kv_get_user_arg,
                    ..Default::default()
                };
                let get = self.args.kv_get_callback.expect("a get callback");
                // SAFETY: args set as a plugin sets them.
                let err = unsafe { get(&mut args) };
                (
                    err,
                    args.value,
                    args.value_size,
                    args.value_deleter_callback,
                )
            }
            None => {
                let mut args = sys::PJRT_KeyValueTryGetCallback_Args {
                    struct_size: sys::PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE as usize,
                    key: key.as_ptr().cast(),
                    key_size: key.len(),
                    callback_error: error_maker(),
                    user_arg: self.args.kv_try_get_user_arg,
                    ..Default::default()
                };
                let try_get = self.args.kv_try_get_callback.expect("a try_get callback");
                // SAFETY: args set as a plugin sets them.
                let err = unsafe { try_get(&mut args) };
                (
                    err,
                    args.value,
                    args.value_size,
                    args.value_deleter_callback,
                )
            }
        };
        if !err.is_null() {
            return Err(last_error());
        }
        // SAFETY: a successful get hands over `len` bytes at `value`, freed by its deleter.
        let bytes = unsafe { std::slice::from_raw_parts(value.cast::<u8>(), len) }.to_vec();
        unsafe { deleter.expect("a deleter")(value) };
        Ok(bytes)
    }
}

#[test]
fn a_value_put_is_got_back_byte_for_byte() {
    let plugin = Plugin::new(Arc::new(Memory::default()));
    plugin.put("node/0", &[0, 1, 255, 0]).unwrap();
    plugin.put("empty", &[]).unwrap();
    assert_eq!(plugin.get("node/0", Some(1000)).unwrap(), [0, 1, 255, 0]);
    assert_eq!(plugin.get("node/0", None).unwrap(), [0, 1, 255, 0]);
    assert_eq!(plugin.get("empty", None).unwrap(), Vec::<u8>::new());
    plugin.put("node/0", b"again").unwrap();
    assert_eq!(plugin.get("node/0", Some(0)).unwrap(), b"again");
}

#[test]
fn a_get_waits_for_a_put_from_another_thread() {
    let store = Arc::new(Memory::default());
    let plugin = Plugin::new(store.clone());
    let putter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        store.put("late", b"here").unwrap();
    });
    assert_eq!(plugin.get("late", Some(10_000)).unwrap(), b"here");
    putter.join().unwrap();
}

#[test]
fn missing_keys_are_the_codes_pjrt_expects() {
    let plugin = Plugin::new(Arc::new(Memory::default()));
    let start = Instant::now();
    let (code, message) = plugin.get("absent", Some(50)).unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(50));
    assert_eq!(code, sys::PJRT_Error_Code_PJRT_Error_Code_DEADLINE_EXCEEDED);
    assert!(
        message.contains("\"absent\"") && message.contains("50ms"),
        "{message}"
    );
    let (code, message) = plugin.get("absent", None).unwrap_err();
    assert_eq!(code, sys::PJRT_Error_Code_PJRT_Error_Code_NOT_FOUND);
    assert!(message.contains("\"absent\""), "{message}");
}

#[test]
fn store_failures_and_panics_come_back_as_errors() {
    let plugin = Plugin::new(Arc::new(Memory::default()));
    let (code, message) = plugin.put("refused", b"x").unwrap_err();
    assert_eq!(code, sys::PJRT_Error_Code_PJRT_Error_Code_UNAVAILABLE);
    assert!(message.contains("refuses \"refused\""), "{message}");
    let (code, message) = plugin.put("panics", b"x").unwrap_err();
    assert_eq!(code, sys::PJRT_Error_Code_PJRT_Error_Code_UNAVAILABLE);
    assert!(message.contains("panicked"), "{message}");
    let (code, message) = plugin.put_bytes(&[0xff, 0xfe], b"x").unwrap_err();
    assert_eq!(code, sys::PJRT_Error_Code_PJRT_Error_Code_INVALID_ARGUMENT);
    assert!(message.contains("not UTF-8"), "{message}");
}
