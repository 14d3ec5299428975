"""The Slurm executor: the preset (`preset.py`: arguments, the SlurmExecutor, its CLI factory, rendering), a
submitted job's state read back from the scheduler (`state.py`: squeue, sacct, scontrol over the tunnel), and
what its container sees (`mounts.py`: a data path outside every mount, warned of)."""
