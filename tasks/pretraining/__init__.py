"""The pretraining heart: masking objectives (MLM, WWM, N-gram, Mac, PerLM, NSP/SOP), packing, heads, the loop."""
