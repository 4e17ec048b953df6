#!/usr/bin/env python3
"""Export a small Fashion-MNIST CNN as a TorchScript file for `hpctrain train --model FILE.pt`.

The model has batch norm and dropout, so it exercises what a scripted model
brings to the C++ trainer: train/eval mode switching, random layers and
buffers (batch-norm running statistics). Input [N, 1, 28, 28] float, output
logits [N, 10].

    PY=$(scripts/install-deps.sh --print-python)
    $PY scripts/export_torchscript.py -o fm_cnn.pt          # torch.jit.script
    $PY scripts/export_torchscript.py -o fm_cnn.pt --trace  # torch.jit.trace

Run it with the python3 whose torch hpctrain was built against (the
environment scripts/install-deps.sh makes), so that the file's operators are
those of the libtorch that trains it.
"""
import argparse

import torch
from torch import nn


class FashionCnn(nn.Module):
    """conv3x3(16)-BN-ReLU-pool, conv3x3(32)-BN-ReLU-pool, dropout, fc64-ReLU, dropout, fc10."""

    def __init__(self, dropout: float = 0.25):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.drop1 = nn.Dropout(dropout)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.drop2 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = self.drop1(torch.flatten(x, 1))
        x = self.drop2(torch.relu(self.fc1(x)))
        return self.fc2(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", required=True, help="TorchScript file to write (.pt)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the initial weights")
    ap.add_argument("--dropout", type=float, default=0.25)
    ap.add_argument("--trace", action="store_true", help="torch.jit.trace instead of torch.jit.script")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    model = FashionCnn(args.dropout)
    if args.trace:
        # Traced in training mode so dropout and batch-norm updates are in
        # the graph; the trainer switches modes with train()/eval().
        scripted = torch.jit.trace(model.train(), torch.zeros(2, 1, 28, 28), check_trace=False)
    else:
        scripted = torch.jit.script(model)
    scripted.save(args.output)
    n = sum(p.numel() for p in model.parameters())
    b = sum(1 for _ in model.buffers())
    print(f"wrote {args.output}: {'traced' if args.trace else 'scripted'} FashionCnn, "
          f"{n} parameters, {b} buffers")


if __name__ == "__main__":
    main()
