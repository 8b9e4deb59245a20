"""A model's price per million tokens: the value the price table and the model catalogue share
(below both, so the table can read the catalogue's prices)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Price:
    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal

    @classmethod
    def of(
        cls,
        input: float | str,
        output: float | str,
        cache_read: float | str | None = None,
        cache_write: float | str | None = None,
    ) -> Price:
        i = Decimal(str(input))
        return cls(
            input=i,
            output=Decimal(str(output)),
            cache_read=Decimal(str(cache_read)) if cache_read is not None else i,
            cache_write=Decimal(str(cache_write)) if cache_write is not None else i,
        )
