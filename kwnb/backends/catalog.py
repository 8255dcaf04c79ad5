"""The backends kwnb ships, as the index knows them before importing any: where each lives and
its own options. Listing options (for `%%kw_worker` and `kwnb run`) must not import a backend:
`%load_ext kwnb` would otherwise load Slurm's module and the warm pool with its exit handler.

Each option is an (args, kwargs) pair for argparse and IPython's magic_arguments; each `dest` is
a keyword of the launcher's constructor.
"""
from __future__ import annotations

from dataclasses import dataclass

NETWORKS = ("private", "host")  # --network of local tasks (backends/netns.py)


@dataclass(frozen=True)
class Backend:
    """A way of starting tasks: `launcher` is "module:Class", imported only when a run uses it.

    A package adds one through the entry-point group `kwnb.backends`, naming either such a
    declaration (its module stays light: imported to list options) or a Launcher class (whose
    module is then imported whenever options are listed)."""

    launcher: str
    arguments: tuple[tuple[tuple, dict], ...] = ()


LOCAL_ARGUMENTS = (
    (("--network",), dict(choices=NETWORKS, default=None,
                          help="local tasks in a network of their own that no other host can connect into "
                               "(private), or on this machine's (host); default private where user "
                               "namespaces work and either slirp4netns or pasta can give it outside access or "
                               "someone else could connect to the tasks (a JupyterHub, other users), else host")),
    (("--cold",), dict(action="store_false", dest="warm", default=None,
                       help="start every task in a new interpreter, not in one that has already imported "
                            "TensorFlow (also KWNB_WARM=0)")),
)

SLURM_ARGUMENTS = (
    (("--partition",), dict(default=None, metavar="P", help="Slurm partition (--backend slurm)")),
    (("--nodes",), dict(type=int, default=None, metavar="K", help="Slurm nodes to spread the tasks over")),
    (("--time",), dict(default=None, metavar="LIMIT", help="Slurm time limit, e.g. 30 or 1:00:00")),
    (("--sbatch-arg",), dict(action="append", default=None, metavar="ARG", dest="sbatch_args",
                             help="extra sbatch option, e.g. --sbatch-arg=--mem=4G (repeatable)")),
)

RAY_INSTALL = 'pip install "kwnb[ray]"'  # plain ray: actors and placement groups, no dashboard
RAY_ADDRESS = (("--address",), dict(default=None, metavar="ADDR",
                                     help="Ray head to join, HOST:PORT (--backend ray; default: the cluster this "
                                          f"kernel joined, else $RAY_ADDRESS, else auto; needs {RAY_INSTALL})"))
RAY_ARGUMENTS = (
    RAY_ADDRESS,
    (("--spread",), dict(action="store_true", default=None,
                         help="one task per Ray node (STRICT_SPREAD); default: packed onto as few nodes as fit")),
    (("--cpus-per-task",), dict(type=float, default=None, metavar="C", help="CPUs Ray reserves per task (default 1)")),
    (("--gpus-per-task",), dict(type=float, default=None, metavar="G", help="GPUs Ray reserves per task (default 0)")),
)

BUILTIN = {
    "local": Backend("kwnb.backends.local:LocalLauncher", LOCAL_ARGUMENTS),
    "slurm": Backend("kwnb.backends.slurm:SlurmLauncher", SLURM_ARGUMENTS),
    "ray": Backend("kwnb.backends.ray:RayLauncher", RAY_ARGUMENTS),
}
