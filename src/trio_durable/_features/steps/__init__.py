"""The steps feature."""
