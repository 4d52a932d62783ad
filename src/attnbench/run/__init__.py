"""Running cases: where they run (`session`: this process, worker processes, Ray), the sweep
itself (`sweep`: check, inputs, plan, accuracy gate, measurement, row), the worker pool
(`pool`, `worker`), the Ray path (`raycluster`), what `all` means on a device (`policy`), the
knob search (`tune`) and the timing cross-checks (`fidelity`). Import from the submodules; this
package imports nothing.
"""
