"""The search feature."""
