"""Operating a deployment: consumer-group lag and its exporter (``ttsflow lag``), the KEDA
scaling rule, and a simulation of lag-based scaling against a request-rate trace (``ttsflow scale``)."""

__all__: list[str] = []
