"""Built-in providers. They register their kinds as the packages under ``plugins/`` do, and import
only ``switchboard.sdk``."""
