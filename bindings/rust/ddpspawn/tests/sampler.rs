//! `DistributedSampler` through the C ABI: torch's padding and striding
//! without shuffle, one shared permutation with it (bindings/python's
//! test_sampler.py compares the indices with torch's own), and refusals.

use ddpspawn::{DistributedSampler, ErrorKind};

#[test]
fn without_shuffle_pads_and_strides_as_torch() {
    let ranks: Vec<Vec<usize>> = (0..3)
        .map(|rank| {
            DistributedSampler::new(10, 3, rank)
                .shuffle(false)
                .indices()
                .unwrap()
        })
        .collect();
    assert_eq!(
        ranks,
        vec![vec![0, 3, 6, 9], vec![1, 4, 7, 0], vec![2, 5, 8, 1]]
    );
    let dropped = DistributedSampler::new(10, 3, 0)
        .shuffle(false)
        .drop_last(true)
        .indices()
        .unwrap();
    assert_eq!(dropped, vec![0, 3, 6]);
}

#[test]
fn shuffled_ranks_share_one_permutation_that_changes_by_epoch() {
    let mut all: Vec<usize> = (0..4)
        .flat_map(|rank| {
            DistributedSampler::new(20, 4, rank)
                .seed(3)
                .indices()
                .unwrap()
        })
        .collect();
    let first = DistributedSampler::new(20, 4, 0).seed(3).indices().unwrap();
    all.sort_unstable();
    assert_eq!(all, (0..20).collect::<Vec<_>>());
    let mut next = DistributedSampler::new(20, 4, 0).seed(3);
    next.set_epoch(1);
    assert_ne!(next.indices().unwrap(), first);
    assert_ne!(first, vec![0, 4, 8, 12, 16], "seed 3 shuffles");
}

#[test]
fn bad_settings_are_named() {
    let err = DistributedSampler::new(10, 3, 3).indices().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.to_string()
            .contains("rank 3 is out of range for 3 replicas"),
        "{err}"
    );
    let err = DistributedSampler::new(0, 1, 0).indices().unwrap_err();
    assert!(err.to_string().contains("the dataset is empty"), "{err}");
}
