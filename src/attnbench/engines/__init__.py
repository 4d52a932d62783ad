"""What serving engines run: each vLLM/SGLang setting's kernel path on Hopper, as cited data."""

from attnbench.engines import paths as paths  # first: `engines.mla` builds on its types
