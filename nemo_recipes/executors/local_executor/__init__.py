"""The local executor: the preset (`preset.py`: torchrun on this machine)."""
