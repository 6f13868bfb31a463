"""Tiered memory for the embedding tables: rows in HBM, DDR or on SSD, behind a software-managed cache."""

from harness.reference.tiered.cache import CachePolicy, CacheStats, RowCache
from harness.reference.tiered.embeddings import (
    CachedShard,
    TieredEmbeddingCollection,
    lookahead,
    state_columns,
)
from harness.reference.tiered.store import MemoryRows, RowStore, SsdRows, ssd_io

__all__ = [
    "CachePolicy",
    "CacheStats",
    "CachedShard",
    "MemoryRows",
    "RowCache",
    "RowStore",
    "SsdRows",
    "TieredEmbeddingCollection",
    "lookahead",
    "ssd_io",
    "state_columns",
]
