#!/usr/bin/env python3
"""The training step of pstrain's fmnist_cnn in PyTorch, for bench_train_step --device cuda.

The same model as worker/nn/model_spec.cc (conv 5x5x32 pad 2, ReLU, max-pool 2, conv 5x5x64
pad 2, ReLU, max-pool 2, dense 1024, ReLU, dropout 0.4, dense 10), the default job's optimizer
(SGD, Nesterov momentum 0.9, weight decay 5e-4) and the same step as pstrain's trainer: the batch
copied from host memory, forward, cross-entropy, backward, update, synchronized.
cudnn.benchmark is on (PyTorch's fastest convolutions); --precision tf32 allows TF32 in cuBLAS
and cuDNN, fp32 forbids it.

  python3 tools/torch_step_bench.py [--precision fp32|tf32] [--batches 64,256,512,1024]
                                    [--steps N] [--data-on-gpu]
Prints "torch version=V", then one "torch batch=B images_per_s=X ms_per_step=Y" line per batch.
Exit 77 when torch or a CUDA device is missing (the line says which).
"""
import argparse
import sys
import time


def build(nn, classes=10):
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Dropout(0.4), nn.Linear(1024, classes))


def bench_batch(torch, batch, steps, data_on_gpu):
    nn = torch.nn
    model = build(nn).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    x_host = torch.randn(batch, 1, 28, 28)
    y_host = torch.arange(batch) % 10
    x_dev, y_dev = x_host.cuda(), y_host.cuda()

    def step():
        x, y = (x_dev, y_dev) if data_on_gpu else (x_host.cuda(), y_host.cuda())
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        loss.item()  # the loss on the host each step, as pstrain's trainer has it

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return batch * steps / seconds, 1e3 * seconds / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", choices=("fp32", "tf32"), default="fp32")
    parser.add_argument("--batches", default="64,256,512,1024")
    parser.add_argument("--steps", type=int, default=0, help="timed steps per batch (0: about 30,000 images, >= 50)")
    parser.add_argument("--data-on-gpu", action="store_true", help="no host-to-device copy of the batch")
    args = parser.parse_args()
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        sys.exit(f"torch_step_bench: --batches {args.batches!r}: expected numbers separated by commas")
    try:
        import torch
    except ImportError as e:
        print(f"torch_step_bench: no torch in {sys.executable}: {e}")
        return 77
    if not torch.cuda.is_available():
        print(f"torch_step_bench: torch {torch.__version__} sees no CUDA device")
        return 77
    tf32 = args.precision == "tf32"
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    print(f"torch version={torch.__version__}", flush=True)
    for batch in batches:
        steps = args.steps or max(50, 30000 // batch)
        ips, ms = bench_batch(torch, batch, steps, args.data_on_gpu)
        print(f"torch batch={batch} images_per_s={ips:.1f} ms_per_step={ms:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
