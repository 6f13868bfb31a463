"""Sharded training of the reference DLRM on torch.distributed (torchrun; gloo on CPU, NCCL on GPU)."""
