"""The retention feature."""
