"""`kwnb.slurm`, the name README and notebook 04 use: the Slurm backend lives in kwnb/backends/slurm.py."""
from .backends.slurm import SlurmLauncher, available, srun_exit_codes

__all__ = ["SlurmLauncher", "available", "srun_exit_codes"]
