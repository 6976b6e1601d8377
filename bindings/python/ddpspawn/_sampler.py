"""``distributed_sampler_indices``: torch's ``DistributedSampler`` indices through the C ABI
(``ddpspawn_distributed_sampler_indices``), for loops without ``torch.utils.data``."""

from __future__ import annotations

import ctypes
from typing import List

from . import _lib


def distributed_sampler_indices(
    dataset_size: int,
    num_replicas: int,
    rank: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    epoch: int = 0,
) -> List[int]:
    """The indices ``rank`` of ``num_replicas`` reads in ``epoch``: index for index those of
    ``torch.utils.data.DistributedSampler(dataset, num_replicas, rank, shuffle, seed, drop_last)``
    after ``set_epoch(epoch)``. Bad settings raise ``InvalidArgumentError``, named."""
    lib = _lib.lib()
    count = ctypes.c_size_t(0)
    arguments = (dataset_size, num_replicas, rank, int(shuffle), seed, int(drop_last), epoch)
    _lib.check(lib.ddpspawn_distributed_sampler_indices(*arguments, None, 0, ctypes.byref(count)))
    indices = (ctypes.c_int64 * max(1, count.value))()
    _lib.check(
        lib.ddpspawn_distributed_sampler_indices(
            *arguments, indices, count.value, ctypes.byref(count)
        )
    )
    return list(indices[: count.value])
