"""copilot-otel: GitHub Copilot CLI session events as OpenTelemetry traces and Prometheus metrics."""

__version__ = "0.1.0"

__all__ = ["__version__"]
