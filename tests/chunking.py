"""Splitting text at random places, as reads of a growing log file do."""
import random


def random_chunks(text: str, seed: int, largest: int = 64) -> list[str]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        size = rng.randint(1, largest)
        out.append(text[i:i + size])
        i += size
    return out
