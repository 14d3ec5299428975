"""The Kubernetes executor: the preset (`preset.py`: arguments and pod shape, the kubeconfig, the shared
NEMORUN_HOME, rendering) and what the Kubeflow Trainer of each supported version accepts (`trainer.py`)."""
