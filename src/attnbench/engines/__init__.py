"""What serving engines run: each vLLM/SGLang setting's kernel path on Hopper, as cited data."""
