"""Delivery of spans and log records: the export queue, the sinks (file, OTLP), the dead-letter file, rotation."""
