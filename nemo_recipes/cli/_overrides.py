"""Moved to `nemo_recipes.overrides` (shared with the examples); kept so that existing imports keep working."""

from nemo_recipes.overrides import apply_overrides, parse_overrides  # noqa: F401
