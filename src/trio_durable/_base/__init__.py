"""The vocabulary every layer shares: records, errors, the clock, the converter, bounds."""
