"""The seeds' design as a benchmark peer: Celery + Redis, one synthesis task per request.

Not part of the ttsflow product (setuptools does not package ``bench``); it needs the
``bench`` extra (``pip install -e '.[bench]'``). See :mod:`bench.baseline.app`.
"""

__all__ = ["app"]
