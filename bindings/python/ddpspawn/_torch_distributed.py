"""torch.distributed's default group in a rank of :func:`ddpspawn.spawn`.

Code written for ``mp.spawn`` reaches for ``torch.distributed`` (a
``DistributedSampler``, ``dist.get_rank()``, ``dist.all_reduce``). A rank whose
code has imported torch by the time fn runs (fn's module imports it, or a
forked rank inherited it) gets the default group before fn, with the same
ranks and backend as its :class:`ddpspawn.Context`, and loses it when fn
returns. A rank that has not imported torch pays nothing: importing it costs
seconds per spawned rank. The group meets through a FileStore in the
launcher's private run directory (``DDPSPAWN_RUN_DIR``, mode 0700), so one
node's job needs no port. With several nodes there is no shared directory;
the group is not made there (``docs/bring-your-own-model.md``).
"""

from __future__ import annotations

import datetime
import os
import sys
from typing import Optional

# In the launcher's run directory; the launcher removes it with the directory.
_STORE_NAME = "torch_distributed.store"


def _one_node() -> bool:
    world = os.environ.get("WORLD_SIZE")
    local = os.environ.get("LOCAL_WORLD_SIZE")
    return world is not None and world == local


def init(rank: int, world_size: int, backend: str, timeout: Optional[float]) -> bool:
    """Makes torch.distributed's default group, if this rank wants one.

    Returns whether it did (so that :func:`shutdown` undoes only its own).
    """
    run_dir = os.environ.get("DDPSPAWN_RUN_DIR")
    if "torch" not in sys.modules or run_dir is None or not _one_node():
        return False
    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        return False
    store = dist.FileStore(os.path.join(run_dir, _STORE_NAME), world_size)
    dist.init_process_group(
        backend=backend,
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout) if timeout else None,
    )
    return True


def shutdown() -> None:
    """Destroys the default group :func:`init` made (once fn has returned)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
