"""The waits feature."""
