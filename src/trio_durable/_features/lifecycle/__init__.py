"""The lifecycle feature."""
