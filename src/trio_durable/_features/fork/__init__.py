"""The fork feature."""
