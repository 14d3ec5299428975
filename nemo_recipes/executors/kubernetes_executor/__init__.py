"""The Kubernetes executor: the preset (`preset.py`: arguments and pod shape, the shared NEMORUN_HOME, rendering),
the kubeconfig as the preset reads it (`kubeconfig.py`) and what the Kubeflow Trainer of each supported version
accepts (`trainer.py`)."""
