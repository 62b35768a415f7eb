"""Built-in providers. They use the same hooks as the packages under ``plugins/``."""
