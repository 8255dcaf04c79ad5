"""Which network a run's local tasks get when it does not say: the one decision that the launcher
(local.py), the warm first cell (prewarm.py) and `kwnb doctor` all ask, and the notes
that go with it (docs/hub-network.md#network-isolation-defaults).

- `--network`, else $KWNB_NETWORK, is obeyed as given;
- a ps run without a chief task gets the host network (the notebook coordinates its tasks and must reach
  them; under `--chief` the chief task coordinates, inside the run's network);
- private wherever it also reaches the outside (user namespaces or root, and a working slirp4netns
  or pasta), as before;
- private without outside access wherever someone else could connect to the tasks (machine/neighbours.py:
  a JupyterHub, other people's processes or logins, a Kubernetes pod network, a public address):
  TensorFlow's servers run any graph they are sent, so an open port is code execution as its owner;
- else the host network: a single-user machine with nobody else on it keeps its tasks' downloads,
  and is told once how to isolate them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import OptionError
from ..machine.neighbours import Neighbours
from .catalog import NETWORKS
from .netns import Support

NETWORK_ENV = "KWNB_NETWORK"  # private or host: the default for runs that do not say (e.g. benchmarks: host)
OFFLINE = ("downloads inside fail (kwnb.datasets.mnist still loads its offline sample; fetch other data in the "
           "notebook before the run)")


@dataclass(frozen=True)
class Choice:
    network: str  # private or host
    why: str  # in words, for the doctor
    said_by: str = ""  # "--network" or "$KWNB_NETWORK" when given, "" for the default

    @property
    def given(self) -> bool:
        return bool(self.said_by)


def wanted(option: str | None, environ: dict | None = None) -> tuple[str | None, str]:
    """The network asked for and who asked (--network wins over $KWNB_NETWORK); (None, "") for the default."""
    environ = os.environ if environ is None else environ
    network, said = (option, "--network") if option else (environ.get(NETWORK_ENV) or None, f"${NETWORK_ENV}")
    if network not in (None, *NETWORKS):
        raise OptionError(f"{said} must be one of {', '.join(NETWORKS)}, not {network!r}")
    return network, said if network else ""


def coordinated_here(task_types: list[str]) -> bool:
    """The notebook coordinates the run's tasks: ps tasks and no chief task (engine/tasks/roles.py). A chief
    task comes first (cluster.plan_tasks); the chief entry reserved for the notebook comes last."""
    return "ps" in task_types and task_types[0] != "chief"


def choose(network: str | None, said_by: str, ps: bool, found: Support, others: Neighbours) -> Choice:
    """The network a run gets: `network` as given, else the default for this machine (module docstring).
    `ps`: the notebook coordinates the run's tasks (`coordinated_here`)."""
    if network:
        return Choice(network, f"{said_by}={network}", said_by)
    if ps:
        return Choice("host", "a ps run: the notebook coordinates its tasks and must reach them")
    if found.complete:
        return Choice("private", f"private networks work here, with outside access through {found.tool}")
    if found.possible and others.present:
        return Choice("private", f"someone else could connect to the tasks: {others.who()}")
    if not found.possible:
        return Choice("host", f"kwnb cannot make a private network here ({found.forbidden_by})")
    return Choice("host", f"nobody else was seen on this machine, and a private network here {lacks(found)}")


def lacks(found: Support) -> str:
    """What a possible private network lacks here, in words ("" where it lacks nothing)."""
    if found.unusable:
        return f"has no outside access: {found.unusable}"
    if not found.tool:
        return "has no outside access: neither slirp4netns nor pasta is installed"
    return f"resolves no names: {found.dns}" if found.dns else ""


def outside_fix(found: Support) -> str:
    """How to give a private network outside access (or names) here: what `lacks` says it lacks."""
    if found.unusable:
        return ("let users open /dev/net/tun (chmod 666 /dev/net/tun, the kernel's default; in a container, "
                "--device /dev/net/tun)")
    if not found.tool:
        return "install slirp4netns or passt (pasta)"
    return "point /etc/resolv.conf at a resolver off the loopback"


_told_host = False  # the host-network note: once per process, so once per kernel


def host_note(choice: Choice, found: Support, others: Neighbours, ps: bool = False) -> str:
    """The one line, once per process, on who can connect to host-network tasks and how to isolate them;
    nothing where nobody else was seen (a single-user laptop: there it would only be noise). `ps`: the
    notebook coordinates the run's tasks (`coordinated_here`)."""
    global _told_host
    if _told_host or choice.given or not others.present:
        return ""
    _told_host = True
    exposed = f"the tasks listen on every interface of this machine, so others can connect to them ({others.who()})"
    if others.on_this_machine:
        exposed = f"other users of this machine can connect to the tasks' ports and run code as you ({others.who()})"
    if ps:
        return f"{exposed}: a ps run cannot be private, since this notebook coordinates its tasks"
    if not found.possible:
        organiser = ("the organiser can allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                     "user.max_user_namespaces > 0, or the container's seccomp profile)" if others.on_this_machine
                     else "use a firewall")
        return f"{exposed}, and kwnb cannot isolate them here ({found.forbidden_by}): {organiser}"
    if not found.tool:
        install = found.unusable or "install slirp4netns or passt for outside access inside"
        return f"{exposed}; --network private isolates them ({install})"
    return f"{exposed}; --network private isolates them, but there {found.dns}"


def private_notes(found: Support) -> list[str]:
    """What a private network here lacks, said with every run that uses one."""
    if found.unusable:
        return [f"the private network has no outside access ({found.unusable}): {OFFLINE}"]
    if not found.tool:
        return [f"the private network has no outside access (neither slirp4netns nor pasta is installed): {OFFLINE}"]
    return [f"in the private network {found.dns}: downloads by name fail"] if found.dns else []


def tool_failed_note(error: str) -> str:
    """Said with a run whose user-mode networking failed to start (netns.PrivateNetwork.tool_error)."""
    return f"{error}; the run went on in a private network without outside access: {OFFLINE}"
