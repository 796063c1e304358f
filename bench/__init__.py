"""Benchmark peers of ttsflow (not part of the product package; see bench/baseline)."""

__all__: list[str] = []
