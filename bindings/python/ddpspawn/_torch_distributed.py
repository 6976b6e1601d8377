"""torch.distributed's default group in a rank of :func:`ddpspawn.spawn`.

Code written for ``mp.spawn`` reaches for ``torch.distributed`` (a
``DistributedSampler``, ``dist.get_rank()``, ``dist.all_reduce``). A rank asks
for the default group with :func:`ddpspawn.torch.init_process_group` (ctx's
ranks), and :func:`ddpspawn._run.run_rank` destroys it when fn returns. It is
not made unasked: code that calls ``init_process_group`` itself (with the
``MASTER_ADDR`` and ``MASTER_PORT`` every rank gets) must keep working, and
torch refuses a second default group. The group meets through a FileStore in
the launcher's private run directory (``DDPSPAWN_RUN_DIR``, mode 0700), so a
node's job needs no port; with several nodes there is no shared directory,
and it is refused.
"""

from __future__ import annotations

import datetime
import os
from typing import Optional

from ._errors import FailedPreconditionError, UnavailableError

# In the launcher's run directory; the launcher removes it with the directory.
_STORE_NAME = "torch_distributed.store"
_made = False  # this rank's default group is ours to destroy


def init(rank: int, world_size: int, backend: str, timeout: Optional[float]) -> None:
    """Makes torch.distributed's default group over this job's ranks."""
    global _made
    run_dir = os.environ.get("DDPSPAWN_RUN_DIR")
    if run_dir is None:
        raise FailedPreconditionError(
            "ddpspawn.torch.init_process_group runs in a rank of ddpspawn.spawn"
        )
    if os.environ.get("WORLD_SIZE") != os.environ.get("LOCAL_WORLD_SIZE"):
        raise UnavailableError(
            "ddpspawn.torch.init_process_group is for one node's ranks (they meet in the "
            "launcher's directory); with several nodes call torch.distributed."
            "init_process_group yourself (MASTER_ADDR and MASTER_PORT are set)"
        )
    import torch.distributed as dist

    if dist.is_initialized():
        raise FailedPreconditionError("torch.distributed's default group exists already")
    store = dist.FileStore(os.path.join(run_dir, _STORE_NAME), world_size)
    dist.init_process_group(
        backend=backend,
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout) if timeout else None,
    )
    _made = True


def shutdown_if_made() -> None:
    """Destroys the default group :func:`init` made, if it did (once fn returned)."""
    global _made
    if not _made:
        return
    _made = False
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
