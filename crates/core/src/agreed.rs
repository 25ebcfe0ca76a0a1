//! An error every rank of a run holds at once, so the run stops together and says it once:
//! what the ranks' start-up checks agree on (the Trainer's `agree`) and what a collective that
//! finds the ranks out of step reports (`plugins::lockstep`).

use std::fmt;

use crate::error::FlagError;

/// Exit status of bad input (a [`FlagError`]); any other error is 1.
const BAD_INPUT: u8 = 2;

/// An error every rank of a run holds at once: the one of the lowest rank whose checks failed.
/// No rank waits for another, so the CLI prints it once (on rank 0) and ends every rank with
/// [`code`](Self::code) without aborting the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgreedError {
    /// The rank whose error this is.
    pub rank: usize,
    /// The exit status it calls for: 2 for bad input, else 1.
    pub code: u8,
    /// The error, as that rank would have printed it.
    pub message: String,
}

impl fmt::Display for AgreedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rank {
            0 => f.write_str(&self.message),
            rank => write!(f, "rank {rank}: {}", self.message),
        }
    }
}

impl std::error::Error for AgreedError {}

impl AgreedError {
    /// The error of this rank's checks, as bytes for the others: its exit status (never 0),
    /// then its message.
    pub(crate) fn encode(error: &anyhow::Error) -> Vec<u8> {
        let (code, message) = match error.downcast_ref::<FlagError>() {
            Some(flag) => (BAD_INPUT, flag.to_string()),
            None => (1, format!("{error:#}")),
        };
        let mut bytes = vec![code];
        bytes.extend_from_slice(message.as_bytes());
        bytes
    }

    pub(crate) fn decode(rank: usize, bytes: &[u8]) -> Self {
        Self {
            rank,
            code: bytes[0],
            message: String::from_utf8_lossy(&bytes[1..]).into_owned(),
        }
    }
}
