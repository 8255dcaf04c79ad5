"""`kwnb.slurm`, the name docs/user-guide.md and notebook 04 use: the Slurm backend lives in kwnb/backends/slurm.py."""
from .backends.slurm import SlurmLauncher, available, srun_exit_codes

__all__ = ["SlurmLauncher", "available", "srun_exit_codes"]
