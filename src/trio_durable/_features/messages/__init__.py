"""The messages feature."""
