"""A small LightningModule and its data for test_lightning.py, importable by module name in the
ranks that spawn and forkserver start. The Lightning package is $DDPSPAWN_TEST_LIGHTNING's
(pytorch_lightning by default, or lightning.pytorch), which the ranks inherit."""

import importlib
import os

import torch

PACKAGE = os.environ.get("DDPSPAWN_TEST_LIGHTNING", "pytorch_lightning")
pl = importlib.import_module(PACKAGE)


def dataset(n=96, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=generator)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return torch.utils.data.TensorDataset(x, y)


class Classifier(pl.LightningModule):
    """Two linear layers; logs train_loss (sync_dist) and val_loss; Adam with a step schedule."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(),
                                       torch.nn.Linear(16, 2))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y), sync_dist=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.cross_entropy(self(x), y), sync_dist=True)

    def predict_step(self, batch, batch_idx):
        return self(batch[0]).softmax(-1)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)]

    def train_dataloader(self):
        return torch.utils.data.DataLoader(dataset(), batch_size=8)

    def val_dataloader(self):
        return torch.utils.data.DataLoader(dataset(32, seed=1), batch_size=8)

    def test_dataloader(self):
        return torch.utils.data.DataLoader(dataset(32, seed=2), batch_size=8)

    def predict_dataloader(self):
        return self.test_dataloader()


class Probe(Classifier):
    """Classifier that logs what averaged its gradients: the buckets of ddpspawn's reducer, or -1
    when the strategy's model is not ddpspawn's DDP wrapper (torch's, say)."""

    def on_train_epoch_end(self):
        import ddpspawn.torch

        model = self.trainer.strategy.model
        buckets = (model.reducer.bucket_count
                   if isinstance(model, ddpspawn.torch.DistributedDataParallel) else -1)
        self.log("reducer_buckets", float(buckets))


class Sleepy(Classifier):
    """Classifier whose ranks write their pids into $DDPSPAWN_TEST_PIDS when training starts and
    then take their time: a fit to interrupt."""

    def on_train_start(self):
        directory = os.environ["DDPSPAWN_TEST_PIDS"]
        with open(os.path.join(directory, f"rank{self.global_rank}"), "x") as file:
            file.write(str(os.getpid()))

    def training_step(self, batch, batch_idx):
        import time

        time.sleep(0.05)
        return super().training_step(batch, batch_idx)


class FailsOnRankOne(Classifier):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and batch_idx == 2:
            raise ValueError("rank 1 gives up at batch 2")
        return super().training_step(batch, batch_idx)


FABRIC = importlib.import_module(
    "lightning.fabric" if PACKAGE == "lightning.pytorch" else "lightning_fabric")


def fabric_train(fabric, accumulate=2):
    """A plain loop made data-parallel by Fabric: setup, sharded loader, backward without
    synchronizing on accumulating steps, clipping, and the collectives; rank 0's weights and what
    the collectives returned."""
    fabric.seed_everything(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(dataset(), batch_size=8))
    for _ in range(2):
        for index, (x, y) in enumerate(loader):
            accumulating = (index + 1) % accumulate != 0
            with fabric.no_backward_sync(model, enabled=accumulating):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                fabric.backward(loss / accumulate)
            if not accumulating:
                fabric.clip_gradients(model, optimizer, max_norm=0.5)
                optimizer.step()
                optimizer.zero_grad()
    summed = fabric.all_reduce(loss.detach(), reduce_op="sum")
    fabric.barrier()
    # Weights as numpy arrays: Fabric's own spawn returns torch tensors through shared memory that
    # is gone once rank 0 exits.
    return {
        "weights": {k: v.detach().numpy().copy() for k, v in model.state_dict().items()},
        "loss": float(loss.detach()), "loss_sum": float(summed),
        "from_rank_1": fabric.broadcast(f"rank {fabric.global_rank}", src=1),
        "wrapper": type(model._forward_module).__module__,
        "world_size": fabric.world_size,
    }


def shifted_mean_hook(state, bucket):
    """A comm hook of one's own, in torch's API: the mean over the ranks (through
    torch.distributed), plus 0.01 — a result no built-in hook gives."""
    import torch.distributed as dist

    tensor = bucket.buffer()
    tensor.div_(dist.get_world_size())
    future = dist.all_reduce(tensor, async_op=True).get_future()
    return future.then(lambda done: done.value()[0] + 0.01)


class HookOnCpuDDPStrategy(pl.strategies.DDPStrategy):
    """Lightning's DDPStrategy, registering its comm hook with torch's DDP on CPU too (Lightning's
    own registers it only on CUDA, and ignores it on CPU)."""

    def _register_ddp_hooks(self):
        register = importlib.import_module(f"{PACKAGE}.strategies.ddp")._register_ddp_comm_hook
        register(model=self.model, ddp_comm_state=self._ddp_comm_state,
                 ddp_comm_hook=self._ddp_comm_hook, ddp_comm_wrapper=self._ddp_comm_wrapper)
