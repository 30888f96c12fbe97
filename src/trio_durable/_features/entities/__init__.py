"""The entities feature."""
