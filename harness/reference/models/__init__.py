"""The reference models (DLRM with the dot or the DCNv2 interaction), their embedding
collections and the numerics of their tables."""
