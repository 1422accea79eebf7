"""Dollar cost of one experiment from token counts, per model.

Prices are USD per million tokens (Anthropic list prices). Prompt-cache writes
cost 1.25x the input price (5-minute cache) and cache reads 0.1x. A model not in
the table costs 0 unless the settings give prices; the settings override the
table for any model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Price:
    input: float  # USD per million uncached input tokens
    output: float

    @property
    def cache_write(self) -> float:
        return self.input * 1.25

    @property
    def cache_read(self) -> float:
        return self.input * 0.10


# Matched by prefix so dated ids ("claude-sonnet-4-5-20250929") find their family.
PRICES: dict[str, Price] = {
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4-5": Price(3.0, 15.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
}
FREE = Price(0.0, 0.0)


def price_for(model: str, input_override: float = -1.0, output_override: float = -1.0) -> Price:
    base = FREE
    for prefix in sorted(PRICES, key=len, reverse=True):
        if model.startswith(prefix):
            base = PRICES[prefix]
            break
    return Price(input_override if input_override >= 0 else base.input,
                 output_override if output_override >= 0 else base.output)


@dataclass
class Usage:
    """Token counts of one experiment, summed over its requests (repair round included)."""

    input: int = 0  # uncached input tokens
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def add(self, other: "Usage") -> None:
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write

    @property
    def total_in(self) -> int:
        return self.input + self.cache_read + self.cache_write

    def cost(self, price: Price) -> float:
        return (self.input * price.input + self.output * price.output
                + self.cache_read * price.cache_read + self.cache_write * price.cache_write) / 1e6
