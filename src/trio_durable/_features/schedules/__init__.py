"""The schedules feature."""
