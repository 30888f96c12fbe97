"""The determinism feature."""
