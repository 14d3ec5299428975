"""The package's version, in a module of its own: the modules that stamp it (the CLI's `--version`, the default
image tag, a prepared dataset's manifest) read it here instead of importing the package's face (`__init__`, which
imports the catalog). pyproject.toml's `version` says the same."""

__version__ = "0.1.0"
