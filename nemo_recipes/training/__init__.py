"""The only layer that imports NeMo and Megatron: model configs, recipe parts and factories built from the catalog."""
