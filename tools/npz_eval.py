#!/usr/bin/env python3
"""Evaluates a run's weights.npz on the Fashion-MNIST test set with NumPy alone.

It is the model of docs/models.md written out in NumPy (fmnist_cnn and
small_cnn: convolutions with "same" padding, ReLU, 2x2 max pooling, flatten in
NCHW order, dense layers; dropout is off at evaluation) and the input
normalization pstrain uses, so its accuracy equals the run's final test
accuracy: a check that the documented architecture is the one trained, and a
way to use the weights without pstrain.

  tools/npz_eval.py RUN_DIR/weights.npz [--data DIR] [--json]
"""
import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training pixels / 255 (worker/data/normalization.h)


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip or plain) as a uint8 array of its dimensions."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def find(data: Path, stem: str) -> Path:
    for name in (stem + ".gz", stem):
        if (data / name).exists():
            return data / name
    sys.exit(f"npz_eval: no {stem}[.gz] in {data}")


def conv_same(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Stride-1 convolution with (k-1)/2 zero padding; x NCHW, w OIHW."""
    pad = w.shape[-1] // 2
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, w.shape[-2:], axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True) + b[None, :, None, None]


def pool2(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def logits(weights, x: np.ndarray) -> np.ndarray:
    relu = lambda a: np.maximum(a, 0.0)  # noqa: E731
    a = pool2(relu(conv_same(x, weights["conv1.weight"], weights["conv1.bias"])))
    a = pool2(relu(conv_same(a, weights["conv2.weight"], weights["conv2.bias"])))
    a = a.reshape(len(a), -1) @ weights["fc1.weight"].T + weights["fc1.bias"]
    if "fc2.weight" in weights:  # fmnist_cnn; small_cnn ends at fc1
        a = relu(a) @ weights["fc2.weight"].T + weights["fc2.bias"]
    return a


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("weights", type=Path)
    parser.add_argument("--data", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    parser.add_argument("--json", action="store_true", help="print {\"test_accuracy\": A, \"samples\": N}")
    args = parser.parse_args()
    images = read_idx(find(args.data, "t10k-images-idx3-ubyte")).astype(np.float32)
    labels = read_idx(find(args.data, "t10k-labels-idx1-ubyte"))
    x = ((images / 255.0 - MEAN) / STD)[:, None, :, :].astype(np.float32)
    with np.load(args.weights) as npz:
        weights = {name: npz[name] for name in npz.files}
    predicted = np.concatenate([logits(weights, x[i:i + 1000]).argmax(1) for i in range(0, len(x), 1000)])
    accuracy = float((predicted == labels).mean())
    if args.json:
        print(json.dumps({"test_accuracy": accuracy, "samples": int(len(labels))}))
    else:
        print(f"test accuracy {accuracy:.4f} over {len(labels)} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
