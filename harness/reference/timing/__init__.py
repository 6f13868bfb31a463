"""Torch-free clocks of the reference: where a training step's time goes (:mod:`.phases`)."""
