"""Downstream tasks: readers, families (classification, CMRC-style MRC, NER), the CMRC metric, fine-tuning."""
