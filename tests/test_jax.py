"""Keras 3 on JAX across processes (`--framework jax`): what is refused at once, and real 2-process runs on
CPU (marked slow) whose tasks train together, and whose failures kwnb tells in one sentence and ends."""
from __future__ import annotations

import pytest

import kwnb
from kwnb.engine.live.settings import LaunchSettings


@pytest.mark.parametrize("extra, named", [({"ps": 1}, "--ps"), ({"chief": True}, "--chief"),
                                          ({"evaluator": True}, "--evaluator")])
def test_a_jax_run_has_workers_only(extra, named):
    with pytest.raises(kwnb.KwnbError, match=f"--framework jax runs workers only .*not {named}"):
        LaunchSettings(framework="jax", **extra)


def test_an_unknown_framework_is_refused_with_the_known_ones():
    with pytest.raises(kwnb.KwnbError, match="framework must be one of tensorflow, jax, not 'torch'"):
        LaunchSettings(framework="torch")
