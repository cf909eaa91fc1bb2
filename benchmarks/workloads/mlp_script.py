"""A plain training script, written as a user writes one: it does not import perfgate.

benchmarks/script_mode.py measures it with ``perfgate run --script`` beside the same model
written as a perfgate workload (mlp_workload.py in this folder; keep the two alike): an
MLP on random features, AdamW, cross-entropy, batches of 64 from a shuffled DataLoader.
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--samples", type=int, default=4096)
    args = parser.parse_args()

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(args.samples, args.features, generator=g),
                         torch.randint(0, 10, (args.samples,), generator=g))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = nn.Sequential(
        nn.Linear(args.features, args.width), nn.ReLU(),
        nn.Linear(args.width, args.width), nn.ReLU(),
        nn.Linear(args.width, 10),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    device = torch.device("cpu")
    model.to(device).train()
    for epoch in range(args.epochs):
        total = 0.0
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch}: mean loss {total / len(loader):.4f}")


if __name__ == "__main__":
    main()
