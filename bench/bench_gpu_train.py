#!/usr/bin/env python3
"""PyTorch's eager training step for the MLPs of bench_gpu_train, on the
same GPU: Linear-ReLU-Linear-ReLU-Linear, cross-entropy with reduction
'sum', SGD momentum 0.9 Nesterov, weight decay 1e-4, batch 256, FP32 with
TF32 off (tether's default) and on (tether-train --tf32). The batch is
copied host -> device every step from pinned memory, as tether stages it.
Prints the same table rows as bench_gpu_train; exits 77 when PyTorch or a
GPU is missing.
Usage: bench_gpu_train.py [--batch N] [--steps N]"""
import argparse
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIPPED: PyTorch is not installed")
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: PyTorch sees no CUDA device")
        return 77
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    print(f"| model (PyTorch {torch.__version__}) | math | batch | ms / step | examples / s |")
    print("|--------------------|------|-------|-----------|--------------|")
    for hidden, tf32 in ((256, False), (256, True), (2048, False), (2048, True)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        model = torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(hidden, 10)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                              weight_decay=1e-4)
        loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
        x = torch.rand(a.batch, 784).pin_memory()
        y = torch.randint(0, 10, (a.batch,)).pin_memory()
        for i in range(-20, a.steps):
            if i == 0:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            xd, yd = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            opt.zero_grad(set_to_none=False)
            loss = loss_fn(model(xd), yd)
            loss.backward()
            opt.step()
            loss.item()  # tether returns the loss every step too
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3 / a.steps
        name = f"784-{hidden}-{hidden}-10"
        math = "tf32" if tf32 else "fp32"
        print(f"| {name:<18} | {math:<4} | {a.batch:5d} | {ms:9.3f} | {a.batch / ms * 1e3:12.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
