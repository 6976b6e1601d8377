"""The second reference of tools/bench: PyTorch Lightning 2.6.6 with
Trainer(accelerator="cpu", devices=N, strategy=DDPStrategy(start_method="spawn")), on the same
torch 2.11, the same models, batch and steps as ddpspawn_bench and reference_ddp.py; logger,
checkpointing, progress bar and model summary off. Prints the same JSON object.

Usage: python3 reference_lightning.py --workload mlp|conv [--steps N] [--warmup N] [--nprocs N]
                                      [--strategy ddp_spawn|ddpspawn_spawn|ddpspawn_forkserver]

--strategy ddpspawn_*: the same Trainer with ddpspawn.lightning.DDPSpawnStrategy and that start
method (the ddpspawn package and library on PYTHONPATH and DDPSPAWN_LIBRARY) instead of
Lightning's own DDPStrategy(start_method="spawn").

launch_to_first_batch runs from the trainer.fit call (Lightning and torch already imported) to
rank 0's first finished step. second_fit_launch is the same for a second fit in the same process,
of the same model, right after the first: the same Trainer with max_steps raised (ddpspawn's
strategy continues where the first fit ended), or, since Lightning's spawn refuses a second fit
of its Trainer, a new Trainer like the first.
"""
import argparse
import json
import os
import resource
import sys
import tempfile
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import make_batch, make_model  # noqa: E402  the same models

import pytorch_lightning as pl  # noqa: E402
from pytorch_lightning.strategies import DDPStrategy  # noqa: E402


class SameBatch(torch.utils.data.Dataset):
    """Every item is one whole batch (as in the other programs: the same x, y every step)."""

    def __init__(self, workload, length):
        torch.manual_seed(0)
        self.x, self.y = make_batch(workload)
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return self.x, self.y


class Model(pl.LightningModule):
    def __init__(self, workload, warmup, steps, launch_time, result_path):
        super().__init__()
        torch.manual_seed(0)
        self.net = make_model(workload)
        self.warmup, self.steps = warmup, steps
        self.launch_time, self.result_path = launch_time, result_path
        self.first_batch = self.steady_start = 0.0
        self.fit_batches = 0  # in this fit (a second fit starts mid-epoch)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def on_train_start(self):
        self.fit_batches = 0

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.fit_batches += 1
        if self.fit_batches == 1:
            self.first_batch = time.time()
        if self.fit_batches == self.warmup:
            self.steady_start = time.time()

    def on_train_end(self):
        # The job moves at its slowest rank's pace.
        steps_per_s = torch.tensor([self.steps / (time.time() - self.steady_start)])
        steps_per_s = float(self.trainer.strategy.reduce(steps_per_s, reduce_op="min").item())
        rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
        rss = self.trainer.strategy.reduce(rss, reduce_op="max")
        if self.global_rank == 0:
            with open(self.result_path, "w") as f:
                json.dump({"launch_to_first_batch": self.first_batch - self.launch_time,
                           "steps_per_s": steps_per_s, "peak_rss_mb": float(rss.item())}, f)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--mode", default="ddp", choices=["ddp"])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--strategy", default="ddp_spawn",
                        choices=["ddp_spawn", "ddpspawn_spawn", "ddpspawn_forkserver"])
    args = parser.parse_args()
    def make_strategy():
        if args.strategy == "ddp_spawn":
            return DDPStrategy(start_method="spawn", process_group_backend="gloo")
        import ddpspawn.lightning

        return ddpspawn.lightning.DDPSpawnStrategy(
            start_method=args.strategy.split("_", 1)[1], process_group_backend="gloo")

    warnings.filterwarnings("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one intra-op thread per rank, as the others
    total = args.warmup + args.steps

    def make_trainer(tmp):
        return pl.Trainer(
            accelerator="cpu", devices=args.nprocs,
            strategy=make_strategy(),
            max_steps=total, max_epochs=None, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
            default_root_dir=tmp)

    def measure(trainer, model, data, result_path):
        model.result_path = result_path
        model.launch_time = time.time()  # the launch starts here (torch and Lightning imported)
        try:
            trainer.fit(model, data)
        except torch.multiprocessing.ProcessExitedException as e:
            # As in reference_ddp.py: torch 2.11's Gloo group sometimes aborts a rank while it is
            # torn down, after rank 0 has written the measurement, which then stands.
            if not os.path.exists(result_path):
                raise
            print(f"reference_lightning.py: a rank aborted after the measurement: {e}",
                  file=sys.stderr)
        with open(result_path) as f:
            return json.load(f)

    with tempfile.TemporaryDirectory() as tmp:
        # An epoch is one fit's steps: the second fit continues with the next epoch.
        data = torch.utils.data.DataLoader(SameBatch(args.workload, total * args.nprocs),
                                           batch_size=None, shuffle=False)
        model = Model(args.workload, args.warmup, args.steps, 0.0, "")
        trainer = make_trainer(tmp)
        result = measure(trainer, model, data, os.path.join(tmp, "first.json"))
        if args.strategy == "ddp_spawn":
            trainer = make_trainer(tmp)
        else:
            trainer.fit_loop.epoch_loop.max_steps = 2 * total
        second = measure(trainer, model, data, os.path.join(tmp, "second.json"))
        result["second_fit_launch"] = second["launch_to_first_batch"]
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
