//! Checks every rank passes together: before an entry point writes anything or steps, the ranks
//! of a run compare what their checks found, and either all go on or all stop with the same
//! error, so a refusal reaches the user once and no rank is left waiting in a collective.

use burn::tensor::backend::AutodiffBackend;

use super::Trainer;
use crate::agreed::AgreedError;

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
    use crate::error::FlagError;

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
