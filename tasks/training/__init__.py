"""What pretraining and fine-tuning share: batching and data order."""
