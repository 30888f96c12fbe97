"""Starting runs as their callers see them: one, or many written in one batch, and waiting for a run's end."""
