"""The children feature."""
