"""The cost model: parameters, memory, FLOPs, micro batches, step time; ``estimate`` puts them together."""
