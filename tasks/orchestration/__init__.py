"""Running the pipeline: the local Prefect server, and the check that dvc.yaml declares the code each stage runs."""
