"""The smallest ddpspawn program in Python: 2 spawned workers all-reduce rank + 1 and gather a
string each; rank 0's return value comes back to the launcher."""
import ddpspawn


def work(ctx, scale):
    total = ctx.all_reduce([(ctx.rank + 1) * scale], op="sum")
    names = ctx.all_gather_object(f"rank {ctx.rank} of {ctx.world_size}")
    return {"total": total, "names": names}  # only rank 0's value comes back


if __name__ == "__main__":
    print(ddpspawn.spawn(work, args=(10,), nprocs=2))
