"""The private network's request/answer pipe (kwnb/backends/netns.py) stays in step with a holder that
answers late: an answer that comes after its request timed out must not be read as the next one's."""
from __future__ import annotations

import dataclasses

import pytest

from kwnb.backends import netns

# A stand-in holder: the real one, whose first answer comes 1.5 s late (the kernel waits 1 s).
LATE_FIRST_ANSWER = r"""
import runpy, sys, time


class _LateFirstLine:
    def __init__(self, lines):
        self.lines, self.first = lines, True

    def __iter__(self):
        return self

    def __next__(self):
        line = next(self.lines)
        if self.first:
            self.first = False
            time.sleep(1.5)
        return line


sys.stdin = _LateFirstLine(iter(sys.stdin))
runpy.run_path(HOLDER, run_name="__main__")
"""


@pytest.fixture
def late_network(monkeypatch, tmp_path):
    found = netns.support()
    if not found.possible:
        pytest.skip(f"no private network here: {found.forbidden_by}")
    stand_in = tmp_path / "late_holder.py"
    stand_in.write_text(f"HOLDER = {netns.HOLDER!r}\n" + LATE_FIRST_ANSWER)
    monkeypatch.setattr(netns, "HOLDER", str(stand_in))
    network = netns.PrivateNetwork(dataclasses.replace(found, tool="")).start()  # no tool: no request at start
    yield network
    network.close()


def test_a_late_answer_is_dropped_not_read_as_the_next_one(late_network):
    assert late_network.probe("localhost:1") is False  # timed out: its answer comes later
    ports = late_network.free_ports(2)
    assert len(ports) == 2 and len(set(ports)) == 2 and all(20000 <= port < 32000 for port in ports), ports
    assert late_network.probe("localhost:1") is False
    assert late_network._ask("route") == "0"  # no user-mode networking: no default route
    for _ in range(3):  # every later request still gets its own answer
        assert len(late_network.free_ports(3)) == 3
        assert late_network._ask("route") == "0"
    assert late_network.alive


def test_a_holder_that_ended_answers_nothing(late_network):
    late_network.close()
    assert late_network.probe("localhost:1") is False
    with pytest.raises(netns.LaunchError, match="holder has ended"):
        late_network.free_ports(1)
