"""The seeds' design as a benchmark peer: Celery + Redis, one synthesis task per request.

Not part of the ttsflow product, but packaged with it so ``ttsflow bench baseline`` runs from
an installed wheel; it needs the ``bench`` extra (``pip install 'ttsflow[bench]'``). See :mod:`streams.bench.celery_peer.app`.
"""

__all__ = ["app"]
