//! Keeping a native library's chatter off the terminal while an accelerator starts.
//!
//! Some libraries an accelerator loads write straight to file descriptor 2 where no Rust code
//! can filter them: on a machine without a display the Vulkan loader's window-system probing
//! (libwayland, Mesa) says `error: XDG_RUNTIME_DIR is invalid or not set in the environment.`
//! while wgpu enumerates adapters; XLA's CPU plugin logs an absl banner and an INFO line when
//! a client is created with options. They are not errors of the run, but read like one; such
//! calls run with fd 2 sent to `/dev/null` unless `RUST_LOG` is set (then they show, for
//! whoever debugs a driver). Whatever another thread writes to stderr meanwhile is lost too, so
//! only short calls made while a run starts go through here.

/// Runs `probe` with the process's stderr silenced (see the module docs).
#[cfg(unix)]
pub fn stderr<T>(probe: impl FnOnce() -> T) -> T {
    if std::env::var_os("RUST_LOG").is_some() {
        return probe();
    }
    let _silenced = Silenced::start();
    probe()
}

/// Elsewhere the loader's diagnostics go where it sends them.
#[cfg(not(unix))]
pub fn stderr<T>(probe: impl FnOnce() -> T) -> T {
    probe()
}

/// fd 2 pointed at `/dev/null`; the original is restored on drop (also when the probe panics).
#[cfg(unix)]
struct Silenced {
    saved: Option<std::os::fd::OwnedFd>,
}

#[cfg(unix)]
impl Silenced {
    fn start() -> Self {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") else {
            return Self { saved: None };
        };
        // SAFETY: dup(2) has no memory effects; a non-negative result is a new descriptor that
        // nothing else owns, so OwnedFd may close it.
        let saved = unsafe { libc::dup(2) };
        if saved < 0 {
            return Self { saved: None };
        }
        // SAFETY: as above; dup2 makes fd 2 a copy of `null`, which stays open until then.
        let saved = unsafe { OwnedFd::from_raw_fd(saved) };
        if unsafe { libc::dup2(null.as_raw_fd(), 2) } < 0 {
            return Self { saved: None };
        }
        Self { saved: Some(saved) }
    }
}

#[cfg(unix)]
impl Drop for Silenced {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        if let Some(saved) = &self.saved {
            // SAFETY: dup2 of a descriptor we own onto fd 2; it only replaces the descriptor.
            unsafe { libc::dup2(saved.as_raw_fd(), 2) };
        }
    }
}
