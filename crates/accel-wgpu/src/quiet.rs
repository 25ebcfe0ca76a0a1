//! Keeping the graphics stack's diagnostics off the terminal while adapters are probed.
//!
//! On a machine without a display, the Vulkan loader's window-system probing (libwayland,
//! Mesa) writes lines such as `error: XDG_RUNTIME_DIR is invalid or not set in the
//! environment.` straight to file descriptor 2 while wgpu enumerates adapters. They are not
//! errors of the run, but read like one; probing runs with fd 2 sent to `/dev/null` unless
//! `RUST_LOG` is set (then they show, for whoever debugs a driver).

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
