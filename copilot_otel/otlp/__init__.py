"""The wire every signal shares: OTLP settings, transports and answers, the sink contract, retry, limits, resource."""
