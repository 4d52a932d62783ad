"""Measurement: timers, L2 flushing, the adaptive repeat engine and statistics (which know
nothing about attention: they time zero-argument callables), plus what a measurement is judged
against: the device and its ceilings (`hardware`), bytes and FLOPs (`metrics`) and the accuracy
budget (`accuracy`). Import from the submodules; this package imports nothing heavy.
"""
