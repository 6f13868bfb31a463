"""A counter-based random number generator: every value is a pure function of its key.

``uniform(seed, stream, counter)`` hashes the three 64-bit integers with SplitMix64's
finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
OOPSLA 2014), so the value for sample *i* does not depend on which process computes it,
in which order, or in what batch. This is what makes the synthetic data independent of
the world size: any rank produces exactly its shard, and the union over ranks equals
what one producer makes.

All functions take and return numpy arrays and are vectorised; integer arithmetic wraps
modulo 2**64 as the hash requires.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_INV_2_53 = 1.0 / float(1 << 53)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection on uint64 with full avalanche."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + _GOLDEN
        z = (z ^ (z >> _S30)) * _M1
        z = (z ^ (z >> _S27)) * _M2
        return z ^ (z >> _S31)


def key(seed: int, stream: int) -> np.uint64:
    """The 64-bit key of one named stream of a seeded generator."""
    s = mix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    with np.errstate(over="ignore"):
        return mix64(s ^ np.uint64(stream & 0xFFFFFFFFFFFFFFFF))[0]


def bits(k: np.uint64 | np.ndarray, counter: np.ndarray) -> np.ndarray:
    """64 random bits for each counter value under key ``k``."""
    with np.errstate(over="ignore"):
        return mix64(mix64(np.asarray(counter, dtype=np.uint64) ^ k) + k)


def uniform(k: np.uint64 | np.ndarray, counter: np.ndarray) -> np.ndarray:
    """Uniform float64 in [0, 1) for each counter value, 53 bits of resolution."""
    return (bits(k, counter) >> _S11).astype(np.float64) * _INV_2_53


def normal(k: np.uint64 | np.ndarray, counter: np.ndarray) -> np.ndarray:
    """Standard normal float64 for each counter value (Box-Muller on two derived uniforms)."""
    c = np.asarray(counter, dtype=np.uint64)
    with np.errstate(over="ignore"):
        u1 = uniform(k, c)
        u2 = uniform(k ^ _GOLDEN, c)
    return np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
