"""attnbench: measure, check and choose LLM-serving attention kernels on your GPU."""

__version__ = "0.1.0"
