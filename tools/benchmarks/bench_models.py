"""The workloads tools/bench trains, for the Python references: the same models and batches as
tools/benchmarks/bench_models.cc builds in C++ ("mlp", "conv", "resnet18", "gpt")."""

import torch

nn = torch.nn

GPT_VOCAB, GPT_WIDTH, GPT_HEADS, GPT_LAYERS, GPT_SEQUENCE, GPT_BATCH = 512, 256, 4, 4, 128, 8


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convolutions with BatchNorm, a 1x1 projection on the
    shortcut when the shape changes."""

    def __init__(self, inputs, outputs, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = None
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False),
                                          nn.BatchNorm2d(outputs))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet18(nn.Module):
    """ResNet-18 for 32x32 images: a 3x3 stem without pooling, four stages of two blocks."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(64)
        blocks, inputs = [], 64
        for stage, width in enumerate((64, 128, 256, 512)):
            for block in range(2):
                blocks.append(BasicBlock(inputs, width, 2 if stage > 0 and block == 0 else 1))
                inputs = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, 10)

    def forward(self, x):
        y = self.blocks(torch.relu(self.bn(self.stem(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class Gpt(nn.Module):
    """A GPT-style causal transformer: embeddings, 4 post-norm encoder layers (ReLU, feed-forward
    1024, no dropout) under a causal mask, a final LayerNorm and the vocabulary head."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(GPT_VOCAB, GPT_WIDTH)
        self.positions = nn.Embedding(GPT_SEQUENCE, GPT_WIDTH)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(GPT_WIDTH, GPT_HEADS, 4 * GPT_WIDTH, dropout=0.0)
            for _ in range(GPT_LAYERS))
        self.norm = nn.LayerNorm(GPT_WIDTH)
        self.head = nn.Linear(GPT_WIDTH, GPT_VOCAB)
        # No buffer (DDP would broadcast it every step): it follows the input.
        self.mask = torch.triu(torch.full((GPT_SEQUENCE, GPT_SEQUENCE), float("-inf")), 1)

    def forward(self, x):
        if self.mask.device != x.device:
            self.mask = self.mask.to(x.device)
        h = self.tokens(x) + self.positions(torch.arange(x.shape[1], device=x.device))
        h = h.transpose(0, 1)
        for layer in self.layers:
            h = layer(h, self.mask)
        return self.head(self.norm(h.transpose(0, 1))).reshape(-1, GPT_VOCAB)


def make_model(workload):
    if workload == "resnet18":
        return ResNet18()
    if workload == "gpt":
        return Gpt()
    if workload == "conv":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def make_batch(workload):
    """One rank's synthetic batch: (inputs, targets) for cross_entropy(model(inputs), targets)."""
    if workload == "resnet18":
        return torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    if workload == "gpt":
        return (torch.randint(0, GPT_VOCAB, (GPT_BATCH, GPT_SEQUENCE)),
                torch.randint(0, GPT_VOCAB, (GPT_BATCH * GPT_SEQUENCE,)))
    if workload == "conv":
        return torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    return torch.randn(64, 784), torch.randint(0, 10, (64,))
