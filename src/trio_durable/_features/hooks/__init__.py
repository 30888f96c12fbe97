"""The hooks feature."""
