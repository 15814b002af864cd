"""CINO-style multilingual continued pretraining: corpus, alpha/beta resampling, vocabulary extension and pruning."""
