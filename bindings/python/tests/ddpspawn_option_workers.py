"""Worker for test_front_end_options.py: each option that docs/options.md says
ddpspawn.torch.DistributedDataParallel takes, observed in one training step at
its default and with a value given (importable by module name in the ranks)."""

from typing import Any, Callable, Dict, Tuple

import torch

import ddpspawn.torch


class WithOffset(torch.nn.Module):
    """A linear layer plus a buffer that rank 1 changes after wrapping."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(64, 64)
        self.unused = torch.nn.Linear(2, 2)
        self.register_buffer("offset", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.offset


def _step(ctx: Any, **options: Any) -> Dict[str, Any]:
    """One backward through the wrapper on rank-dependent data that fp16 cannot hold exactly;
    what it left behind, or the error that refused the options."""
    module = WithOffset()
    try:
        model = ddpspawn.torch.DistributedDataParallel(module, ctx, **options)
    except Exception as error:  # noqa: BLE001 - the refusal is the observation
        return {"refused": type(error).__name__}
    if ctx.rank == 1:
        module.offset.fill_(5.0)
    x = torch.full((2, 64), 1.0 / (3 + 4 * ctx.rank))
    model(x).sum().backward()
    seen = {
        "refused": None,
        "buckets": model.reducer.bucket_count,
        "offset": module.offset.item(),
        "unused_grad": None if module.unused.weight.grad is None else "a tensor",
        "gradient": module.linear.weight.grad.flatten()[:8].tolist(),
        "compression": model.reducer.compression,
    }
    model.close()
    return seen


# Option -> (the options it needs beside it, the value given, what shows its effect).
EFFECTS: Dict[str, Tuple[Dict[str, Any], Any, Callable[[Dict[str, Any]], Any]]] = {
    "bucket_cap_mb": ({}, 0.001, lambda seen: seen["buckets"]),
    "find_unused_parameters": ({}, True, lambda seen: seen["unused_grad"]),
    "broadcast_buffers": ({}, False, lambda seen: seen["offset"]),
    # The gradients are bucket views already; the option's one effect is its refusal beside
    # find_unused_parameters, whose gradients stay outside the buckets.
    "gradient_as_bucket_view": ({"find_unused_parameters": True}, True,
                                lambda seen: seen["refused"]),
    "comm_hook": ({}, "fp16", lambda seen: seen["gradient"]),
    "powersgd_rank": ({"comm_hook": "powersgd", "powersgd_start_iteration": 0}, 4,
                      lambda seen: seen["compression"]),
    "powersgd_start_iteration": ({"comm_hook": "powersgd"}, 0, lambda seen: seen["compression"]),
}


def option_effects(ctx: Any) -> Dict[str, Tuple[Any, Any]]:
    """Option -> (what its default shows, what the value given shows), rank 1's view."""
    effects = {}
    for option, (beside, value, shows) in EFFECTS.items():
        at_default = shows(_step(ctx, **beside))
        given = shows(_step(ctx, **beside, **{option: value}))
        effects[option] = (at_default, given)
    return ctx.all_gather_object(effects)[1]
