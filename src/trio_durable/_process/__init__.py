"""Opening an engine in a process: its parts assembled, its console served."""
