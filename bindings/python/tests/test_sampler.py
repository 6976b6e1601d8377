"""``distributed_sampler_indices`` against torch's own ``DistributedSampler``, index for index,
over sizes, replicas, seeds, epochs, shuffle and drop_last; and its refusals."""

from __future__ import annotations

import itertools

import pytest
import torch.utils.data

import ddpspawn


# drop_last with fewer samples than replicas leaves torch's ranks without a sample; ddpspawn refuses
# it (test_refusals), so those cases are not compared.
CASES = [
    case
    for case in itertools.product([1, 7, 10, 64, 1000], [1, 2, 3, 4], [True, False], [True, False])
    if not (case[3] and case[0] < case[1])
]


@pytest.mark.parametrize("size,replicas,shuffle,drop_last", CASES)
def test_indices_are_torchs(size: int, replicas: int, shuffle: bool, drop_last: bool) -> None:
    dataset = list(range(size))
    for rank in range(replicas):
        for seed, epoch in [(0, 0), (5, 0), (5, 3)]:
            sampler = torch.utils.data.DistributedSampler(
                dataset, replicas, rank, shuffle=shuffle, seed=seed, drop_last=drop_last
            )
            sampler.set_epoch(epoch)
            ours = ddpspawn.distributed_sampler_indices(
                size, replicas, rank, shuffle=shuffle, seed=seed, drop_last=drop_last, epoch=epoch
            )
            assert ours == list(sampler), (rank, seed, epoch)


def test_refusals() -> None:
    with pytest.raises(ddpspawn.InvalidArgumentError, match="rank 2 is out of range for 2"):
        ddpspawn.distributed_sampler_indices(10, 2, 2)
    with pytest.raises(ddpspawn.InvalidArgumentError, match="without a sample"):
        ddpspawn.distributed_sampler_indices(1, 2, 0, drop_last=True)
    with pytest.raises(ddpspawn.InvalidArgumentError, match="epoch -1 is negative"):
        ddpspawn.distributed_sampler_indices(10, 2, 0, epoch=-1)
