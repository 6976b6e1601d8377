//! `DistributedSampler`: which dataset indices a rank reads in an epoch, index
//! for index those of PyTorch's `torch.utils.data.DistributedSampler` (the C
//! ABI's `ddpspawn_distributed_sampler_indices`; no logic here).

use std::ptr;

use ddpspawn_sys as sys;

use crate::error::{check, Error, Result};
use crate::Context;

/// Shards a dataset of `dataset_size` samples across `num_replicas` ranks, as
/// torch's `DistributedSampler(dataset, num_replicas, rank, shuffle=True,
/// seed=0, drop_last=False)` does; call [`set_epoch`](Self::set_epoch) at the
/// start of every epoch so that the shuffle differs between epochs. Plain
/// values: `Clone`, `Send`, `Sync`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributedSampler {
    dataset_size: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
    epoch: usize,
}

impl DistributedSampler {
    /// `rank` of `num_replicas`, shuffled with seed 0, padded (not dropped).
    pub fn new(dataset_size: usize, num_replicas: usize, rank: usize) -> DistributedSampler {
        DistributedSampler {
            dataset_size,
            num_replicas,
            rank,
            shuffle: true,
            seed: 0,
            drop_last: false,
            epoch: 0,
        }
    }

    /// This context's rank of its world.
    pub fn for_context(context: &Context, dataset_size: usize) -> DistributedSampler {
        DistributedSampler::new(dataset_size, context.world_size(), context.rank())
    }

    pub fn shuffle(mut self, shuffle: bool) -> DistributedSampler {
        self.shuffle = shuffle;
        self
    }

    pub fn seed(mut self, seed: u64) -> DistributedSampler {
        self.seed = seed;
        self
    }

    /// Truncate to a multiple of the replicas instead of padding.
    pub fn drop_last(mut self, drop_last: bool) -> DistributedSampler {
        self.drop_last = drop_last;
        self
    }

    pub fn set_epoch(&mut self, epoch: usize) {
        self.epoch = epoch;
    }

    /// This rank's indices for the current epoch. Invalid settings (an empty
    /// dataset, a rank out of range, drop_last with fewer samples than
    /// replicas) are [`Error::InvalidArgument`], named.
    pub fn indices(&self) -> Result<Vec<usize>> {
        let size = i64::try_from(self.dataset_size)
            .map_err(|_| Error::invalid("the dataset size does not fit an i64"))?;
        let replicas = i32::try_from(self.num_replicas)
            .map_err(|_| Error::invalid("num_replicas does not fit an i32"))?;
        let rank =
            i32::try_from(self.rank).map_err(|_| Error::invalid("rank does not fit an i32"))?;
        let epoch =
            i64::try_from(self.epoch).map_err(|_| Error::invalid("epoch does not fit an i64"))?;
        let call = |out: *mut i64, capacity: usize, count: &mut usize| {
            // SAFETY: `out` is NULL with capacity 0, or holds `capacity`
            // elements; `count` is a valid pointer.
            check(unsafe {
                sys::ddpspawn_distributed_sampler_indices(
                    size,
                    replicas,
                    rank,
                    i32::from(self.shuffle),
                    self.seed,
                    i32::from(self.drop_last),
                    epoch,
                    out,
                    capacity,
                    count,
                )
            })
        };
        let mut count = 0;
        call(ptr::null_mut(), 0, &mut count)?;
        let mut indices = vec![0i64; count];
        call(indices.as_mut_ptr(), indices.len(), &mut count)?;
        // The library's indices are in [0, dataset_size).
        Ok(indices.into_iter().map(|i| i as usize).collect())
    }
}
