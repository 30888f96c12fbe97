"""The on error feature."""
