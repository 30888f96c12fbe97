"""The kernel: turns, replay and decide, commands, scheduling, leases, wakes, settle, dispatch."""
