"""Precision conversion of the voice graphs (fp32, fp16, int8) and its check against fp32.

Rooms: :mod:`~engine.convert.files` (``convert``: the file in, the converted file out,
guaranteed to load), :mod:`~engine.convert.dequant` (int8 -> fp32 rebuild),
:mod:`~engine.convert.fp16` (fp32 -> fp16 and the graph repairs it needs),
:mod:`~engine.convert.checks` (how close the converted voice sounds to fp32),
:mod:`~engine.convert.graph` (the graph views they share).
"""

from engine.convert.checks import CHECK_SENTENCES, Comparison, WordErrorMeter, check_against, compare, summarize
from engine.convert.files import PRECISIONS, ConvertReport, convert
from engine.convert.graph import detect_precision
from engine.errors import ConversionError

__all__ = [
    "CHECK_SENTENCES",
    "PRECISIONS",
    "Comparison",
    "ConversionError",
    "ConvertReport",
    "WordErrorMeter",
    "check_against",
    "compare",
    "convert",
    "detect_precision",
    "summarize",
]
