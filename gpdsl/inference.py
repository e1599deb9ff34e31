"""Inference-method specifications (``gd.inference``): small frozen declarations.

Which numerical method runs for a (likelihood, inference) pair is decided by the explicit
table in :mod:`gpdsl.model`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .linalg import check_jitter


def _check_chunk(owner, chunk_size):
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"{owner}: chunk_size must be None or a positive integer, got {chunk_size!r}")


@dataclass(frozen=True)
class Exact:
    """Dense GP regression, O(N^3): the reference.  ``jitter`` as for the sparse methods
    (the noise variance usually makes it unnecessary)."""

    jitter: float | None = None
    sparse = False

    def __post_init__(self):
        check_jitter("Exact", self.jitter)


@dataclass(frozen=True)
class VFE:
    """Titsias' collapsed variational bound (2009, eq. 16) with the optimal q(u) (eq. 17).

    ``jitter``: None for the dynamic ladder (thesis 5.1.3), or a fixed multiple of
    mean(diag K_uu) (GPML's apxSparse uses 1e-6).  ``chunk_size``: rows per O(N M^2) chunk.
    """

    jitter: float | None = None
    chunk_size: int | None = None
    sparse = True

    def __post_init__(self):
        check_jitter("VFE", self.jitter)
        _check_chunk("VFE", self.chunk_size)


@dataclass(frozen=True)
class FITC:
    """The FITC / SPGP approximate marginal likelihood (Snelson & Ghahramani 2006)."""

    jitter: float | None = None
    chunk_size: int | None = None
    sparse = True

    def __post_init__(self):
        check_jitter("FITC", self.jitter)
        _check_chunk("FITC", self.chunk_size)


INFERENCE = {cls.__name__: cls for cls in (Exact, VFE, FITC)}

__all__ = ["Exact", "VFE", "FITC", "INFERENCE"]
