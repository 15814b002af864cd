"""Corpus stages: acquire sources, ingest and dedupe, jieba segmentation, tokenizer, similar words (Mac)."""
