"""kwnb benchmarks: `python -m benchmarks.run [--smoke] [--rounds N] [--out DIR]` (see README.md here)."""
