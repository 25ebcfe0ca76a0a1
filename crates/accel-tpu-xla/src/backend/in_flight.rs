//! How far the host may run ahead of the device: the programs started and not waited for.
//!
//! The host records and starts the next steps while the device runs earlier ones, as jax's
//! asynchronous dispatch does: a host that waits at every step wakes once a step and takes
//! the cores from the device's threads. What running ahead piles up on the device is the
//! data copied there for programs not yet run (their batches): the host waits for the oldest
//! program once more than [`MAX_BYTES`] were copied since it started, or more than
//! [`MAX_PROGRAMS`] are running, but always lets [`MIN_PROGRAMS`] run. On XLA's CPU plugin a
//! program's temporaries and outputs are allocated when it runs, not when it is started: a
//! queue of 12 steps of a 8192-wide MLP, 256 MiB of gradients each, peaked at the same RSS as
//! a queue of 2, and 40 queued programs with a 16 MiB output each at 60 MB above 2 of them.

use std::collections::VecDeque;

/// Programs always allowed to run at once: the host records the next segment while the
/// device runs this one.
const MIN_PROGRAMS: usize = 2;
/// Programs allowed to run at once, at most.
const MAX_PROGRAMS: usize = 64;
/// Bytes copied to the device since the oldest running program started, at most (above
/// [`MIN_PROGRAMS`]).
const MAX_BYTES: u64 = 64 << 20;

/// The running programs (`T`: what to wait on), oldest first. `copied` arguments are the
/// bytes the host has copied to the device so far, counted by its uploads.
pub struct InFlight<T> {
    /// Each program, with `copied` when it started.
    running: VecDeque<(T, u64)>,
}

impl<T> Default for InFlight<T> {
    fn default() -> Self {
        Self {
            running: VecDeque::new(),
        }
    }
}

impl<T> InFlight<T> {
    /// Adds a program just started.
    pub fn started(&mut self, program: T, copied: u64) {
        self.running.push_back((program, copied));
    }

    /// The oldest program, if the host must wait for it before going on.
    pub fn over_limit(&mut self, copied: u64) -> Option<T> {
        let (_, since) = self.running.front()?;
        let count = self.running.len();
        let bytes = copied - since;
        let over = count > MIN_PROGRAMS && (count > MAX_PROGRAMS || bytes > MAX_BYTES);
        over.then(|| self.running.pop_front().expect("a program is running").0)
    }

    /// Every running program, oldest first, for a host that waits for all of them.
    pub fn take_all(&mut self) -> impl Iterator<Item = T> + use<T> {
        std::mem::take(&mut self.running)
            .into_iter()
            .map(|(p, _)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starts `n` programs numbered from `from`, each after copying `bytes`, waiting as the
    /// client does; returns the programs waited for.
    fn run(flight: &mut InFlight<usize>, from: usize, n: usize, bytes: u64) -> Vec<usize> {
        let mut waited = Vec::new();
        for program in from..from + n {
            // Every program's batch is copied before it starts, program 0's first.
            let copied = (program as u64 + 1) * bytes;
            flight.started(program, copied);
            while let Some(oldest) = flight.over_limit(copied) {
                waited.push(oldest);
            }
        }
        waited
    }

    #[test]
    fn small_batches_run_up_to_the_program_cap() {
        let mut flight = InFlight::default();
        assert_eq!(
            run(&mut flight, 0, MAX_PROGRAMS, 16 << 10),
            Vec::<usize>::new()
        );
        assert_eq!(run(&mut flight, MAX_PROGRAMS, 3, 16 << 10), [0, 1, 2]);
        let all: Vec<usize> = flight.take_all().collect();
        assert_eq!(all, (3..MAX_PROGRAMS + 3).collect::<Vec<_>>());
        assert!(flight.over_limit(u64::MAX).is_none());
    }

    #[test]
    fn large_batches_run_two_at_a_time() {
        let mut flight = InFlight::default();
        // One ImageNet batch of 256 images in f32 is 154 MB: the byte cap holds the queue at
        // two programs, as before the cap existed.
        assert_eq!(run(&mut flight, 0, 5, 154 << 20), [0, 1, 2]);
        assert_eq!(flight.take_all().collect::<Vec<_>>(), [3, 4]);
    }

    #[test]
    fn the_byte_cap_counts_what_was_copied_since_the_oldest_started() {
        let mut flight = InFlight::default();
        // 8 MiB a program: 64 MiB since the oldest fits 9 programs' starts (the oldest's own
        // batch was copied before it started).
        let waited = run(&mut flight, 0, 12, 8 << 20);
        assert_eq!(waited, [0, 1, 2]);
        assert_eq!(flight.running.len(), 9);
    }
}
