"""The front ends and their assembly: `App`, `Engine`, `Client`, workers, options."""
