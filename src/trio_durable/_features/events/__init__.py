"""The events feature."""
