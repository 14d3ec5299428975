"""The Slurm executor: the preset (`preset.py`: arguments, the SlurmExecutor, its CLI factory, rendering) and a
submitted job's state read back from the scheduler (`state.py`: squeue, sacct, scontrol over the tunnel)."""
