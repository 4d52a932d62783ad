"""Measurement: timers, L2 flushing, the adaptive repeat engine and statistics.

Knows nothing about attention: it times zero-argument callables. Import from the submodules
(`measure.engine`, `measure.stats`...); this package imports nothing heavy.
"""
