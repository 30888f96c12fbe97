"""The flow control feature."""
