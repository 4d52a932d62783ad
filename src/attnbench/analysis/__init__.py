"""Analysis of stored result rows (never a GPU): `frame` (rows as a DataFrame), `compare`
(significance-aware ratios), `recommend` and `hybrid` (the decision and the plan), `engines`
(vLLM/SGLang options). Import from the submodules; this package imports nothing.
"""
