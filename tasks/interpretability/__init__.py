"""Analyses of trained models: attention-zone ablation, layer probes, scalar mix, Integrated Gradients."""
