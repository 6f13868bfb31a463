"""Projections of a training step and of the time to train on any system, and their comparison with
real results (docs/projection.md)."""
