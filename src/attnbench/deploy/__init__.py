"""The deployment answer, end to end: ask -> one GPU's rows -> the traffic, replayed on that
GPU's own step costs -> the engine's deployable options -> one decider -> the answer.

`recommend`, the report's first screen and the findings' answer table all call `decide`; the
CLI parses and renders only. Modules: `shapes` (model preset -> shard heads, the index),
`options` (deployable options and their commands), `traffic` (a trace's running batch per
CUDA-graph bucket, replayed on the answering GPU's rows), `plan` (`--measure`'s sampling
design: which replayed steps to time), `estimate` (the estimand and its interval), `decide`
(the decision), `fp8` (the fp8 study's figures for the answer's kernel and shape), `table`
(the findings' answer table).
"""
