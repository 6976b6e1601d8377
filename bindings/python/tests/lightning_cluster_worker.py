"""One rank of a job that a cluster's launcher (torchrun, srun) started: trains
lightning_models' Probe with ddpspawn.lightning's Trainer strategy, or its Fabric loop with the
Fabric strategy, and rank 0 saves what the test compares. Usage: lightning_cluster_worker.py
trainer|fabric OUT; or sleepy OUT, a long fit on ddpspawn's own launcher, to interrupt."""

import os
import sys

import torch

from lightning_models import FABRIC, Probe, Sleepy, fabric_train, pl

import ddpspawn.lightning


def main(kind, out):
    root = os.path.dirname(out)
    if kind == "sleepy":
        with open(os.path.join(os.environ["DDPSPAWN_TEST_PIDS"], "launcher"), "x") as file:
            file.write(str(os.getpid()))
        trainer = pl.Trainer(strategy="ddpspawn", accelerator="cpu", devices=2, max_epochs=1000,
                             enable_progress_bar=False, enable_model_summary=False, logger=False,
                             default_root_dir=root, enable_checkpointing=False)
        trainer.fit(Sleepy())
        return
    if kind == "trainer":
        model = Probe()
        nodes = int(os.environ.get("DDPSPAWN_TEST_NODES", "1"))  # of the job's 2 ranks
        trainer = pl.Trainer(strategy=ddpspawn.lightning.DDPSpawnStrategy(), accelerator="cpu",
                             devices=2 // nodes, num_nodes=nodes, max_epochs=2, enable_progress_bar=False,
                             enable_model_summary=False, logger=False, default_root_dir=root,
                             enable_checkpointing=False)
        trainer.fit(model)
        result = {"weights": [p.detach() for p in model.parameters()],
                  "buckets": float(trainer.callback_metrics["reducer_buckets"]),
                  "rank": trainer.global_rank, "environment": type(
                      trainer.strategy.cluster_environment).__name__}
    else:
        fabric = FABRIC.Fabric(accelerator="cpu", devices=2, strategy="ddpspawn")
        fabric.launch()
        result = fabric_train(fabric)
        result["rank"] = fabric.global_rank
    if result["rank"] == 0:
        torch.save(result, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
