"""Compression of fine-tuned task models: knowledge distillation (:mod:`.distill`, after
TextBrewer) and structured pruning (:mod:`.prune`, after TextPruner), with the encoder
surgery they share (:mod:`.encoder`) and their size and speed measurements (:mod:`.measure`)."""
