"""The metrics: the Prometheus registry, the GenAI instruments, budgets, resumed totals and the OTLP push."""
