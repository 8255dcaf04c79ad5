"""Build ``data/mnist_sample.npz`` from the MNIST t10k IDX files.

Run once by a maintainer, not at install time; the npz it writes ships with kwnb so
that ``kwnb.datasets.mnist.load_data()`` works on machines without internet access:

    python -m kwnb.datasets.build_mnist_sample /work/shared/data/mnist

All 10,000 t10k digits are kept and split 8,000 train / 2,000 test, stratified by
class: the digits are stably sorted by label and every 5th goes to test, so each
class keeps ~20 % in test and the split is the same on every run (no RNG involved).
Both halves stay in the original file order.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
from pathlib import Path

import numpy as np

IMAGES = "t10k-images-idx3-ubyte.gz"
LABELS = "t10k-labels-idx1-ubyte.gz"
COUNT = 10_000
OUT = Path(__file__).resolve().parent / "data" / "mnist_sample.npz"


def read_idx(path: Path, magic: int, dims: tuple[int, ...]) -> np.ndarray:
    """Read a gzipped IDX file, refusing anything that is not exactly what we expect."""
    raw = gzip.decompress(Path(path).read_bytes())
    ndim = len(dims)
    header = np.frombuffer(raw, dtype=">u4", count=1 + ndim)
    if header[0] != magic:
        raise ValueError(f"{path}: magic {header[0]}, expected {magic}")
    if tuple(int(d) for d in header[1:]) != dims:
        raise ValueError(f"{path}: dimensions {tuple(header[1:])}, expected {dims}")
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 * (1 + ndim))
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} data bytes, expected {int(np.prod(dims))}")
    return data.reshape(dims)


def split_mask(labels: np.ndarray) -> np.ndarray:
    """Boolean mask of the digits that go to the test half (every 5th of each class)."""
    order = np.argsort(labels, kind="stable")
    mask = np.zeros(labels.shape, dtype=bool)
    mask[order[::5]] = True
    return mask


def build(src: Path) -> dict[str, np.ndarray]:
    """The four arrays of the sample, keyed like ``mnist.npz`` from Keras."""
    src = Path(src)
    x = read_idx(src / IMAGES, 2051, (COUNT, 28, 28))
    y = read_idx(src / LABELS, 2049, (COUNT,))
    if y.max() > 9:
        raise ValueError(f"{src / LABELS}: label {y.max()} out of range 0-9")
    test = split_mask(y)
    return {"x_train": x[~test], "y_train": y[~test], "x_test": x[test], "y_test": y[test]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help=f"directory holding {IMAGES} and {LABELS}")
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT}")
    args = parser.parse_args(argv)
    arrays = build(args.src)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    for name in (IMAGES, LABELS):
        print(f"md5 {hashlib.md5((args.src / name).read_bytes()).hexdigest()}  {name}")
    for key, a in arrays.items():
        extra = f" classes {np.bincount(a).tolist()}" if key.startswith("y") else ""
        print(f"{key}: {a.shape} {a.dtype}{extra}")
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
