//! Checks every rank passes together: before an entry point writes anything or steps, the ranks
//! of a run compare what their checks found, and either all go on or all stop with the same
//! error, so a refusal reaches the user once and no rank is left waiting in a collective.

use std::fmt;

use burn::tensor::backend::AutodiffBackend;

use super::Trainer;
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
    fn encode(error: &anyhow::Error) -> Vec<u8> {
        let (code, message) = match error.downcast_ref::<FlagError>() {
            Some(flag) => (BAD_INPUT, flag.to_string()),
            None => (1, format!("{error:#}")),
        };
        let mut bytes = vec![code];
        bytes.extend_from_slice(message.as_bytes());
        bytes
    }

    fn decode(rank: usize, bytes: &[u8]) -> Self {
        Self {
            rank,
            code: bytes[0],
            message: String::from_utf8_lossy(&bytes[1..]).into_owned(),
        }
    }
}

impl<B: AutodiffBackend> Trainer<B> {
    /// `checked` on every rank if every rank's checks passed; otherwise, on every rank, the
    /// [`AgreedError`] of the lowest rank that failed. In one process, `checked` itself. Every
    /// rank must call it at the same point (it is one collective).
    pub(super) fn agree<T>(&self, checked: anyhow::Result<T>) -> anyhow::Result<T> {
        let Some(ranks) = self.ranks() else {
            return checked;
        };
        // A passed check is one byte 0 (MPI refuses to gather nothing at all).
        let mine = checked
            .as_ref()
            .err()
            .map_or_else(|| vec![0], AgreedError::encode);
        let all = ranks.all_gather(&mine)?;
        match all.iter().enumerate().find(|(_, bytes)| bytes[0] != 0) {
            None => checked,
            Some((rank, bytes)) => Err(AgreedError::decode(rank, bytes).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_travels_with_its_exit_status() {
        let flag = anyhow::Error::from(FlagError::new("--trainer.x", "1", "2 only"));
        let agreed = AgreedError::decode(1, &AgreedError::encode(&flag));
        assert_eq!(agreed.code, 2);
        assert_eq!(
            agreed.to_string(),
            "rank 1: invalid --trainer.x value `1`: 2 only"
        );
        let other = anyhow::anyhow!("disk").context("reading data");
        let agreed = AgreedError::decode(0, &AgreedError::encode(&other));
        assert_eq!(
            (agreed.code, agreed.to_string().as_str()),
            (1, "reading data: disk")
        );
    }
}
