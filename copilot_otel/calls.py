"""LLM calls: which ones are new, and their chat spans and metrics."""

from __future__ import annotations

from . import attrs as A
from . import spanattrs
from .events import Event
from .records import KIND_CLIENT, span_id_for
from .spans import Agent, OpenSpan, Outbox
from .views import Usage, as_str
from .vocab import ERROR, SUCCESS, Metric


class CallBook:
    """Tells each LLM call once, whichever source reports it, and builds its chat span."""

    def __init__(self, session_id: str, out: Outbox) -> None:
        self.session_id = session_id
        self.out = out
        self._seen: set[str] = set()  # apiCallIds of LLM calls already turned into spans
        self._accounted = True  # the LLM call in flight already has its span
        self._model: str | None = None  # the model of the call in flight (headless stream)

    def first_report(self, usage: Usage) -> bool:
        """A usage report: True unless this call was already reported (the same call through both sources)."""
        if usage.api_call_id is not None:
            if usage.api_call_id in self._seen:
                return False
            self._seen.add(usage.api_call_id)
        self._accounted = True
        return True

    def started(self, event: Event) -> None:
        """model.call_start (live): a call is in flight."""
        self._accounted = False
        self._model = as_str(event.data.get("model")) or self._model

    def finished(self, event: Event) -> Usage | None:
        """model.call_finished: the headless stream's only trace of a call that no usage event reported."""
        if self._accounted or event.data.get("outcome") != "success":
            return None
        self._accounted = True
        return Usage.known(self._model, event.data.get("dispatchDurationMs"))

    def failed(self, event: Event) -> tuple[Usage, str]:
        """model.call_failure: a failed attempt the CLI will retry, and why it failed."""
        self._accounted = True
        data = event.data
        usage = Usage.known(as_str(data.get("model")) or self._model, data.get("durationMs"))
        return usage, str(data.get("statusCode") or data.get("errorType") or "call_failed")

    def record(self, event: Event, usage: Usage, agent: Agent, parent: OpenSpan, session_model: str | None,
               *, error: str | None = None) -> None:
        """Export the chat span of one call, ending at ``event``, and count it."""
        model = usage.model or session_model or "unknown"
        turn = agent.turn
        attributes, tokens = spanattrs.chat(self.session_id, agent.name, usage, model,
                                            turn.turn_id if turn is not None else None)
        duration_ms = usage.duration_ms
        # The CLI times the call from before it logs turn_start; never start before the parent.
        start = max(event.timestamp_ns - int(min(max(duration_ms, 0.0) * 1_000_000, event.timestamp_ns)),
                    parent.start_ns)
        span = parent.child(span_id_for(self.session_id, event.id), f"{A.OP_CHAT} {model}", KIND_CLIENT, start,
                            attributes)
        self.out.span(span.close(event.timestamp_ns, error_type=error))
        if turn is not None and error is None:
            turn.llm_calls += 1
        self.out.count(Metric.LLM_CALLS, model, ERROR if error else SUCCESS)
        self.out.count(Metric.LLM_CALL_DURATION, model, value=max(duration_ms, 0.0) / 1000.0)
        for label, value in tokens.items():
            if value > 0:
                self.out.count(Metric.TOKENS, model, label, value=value)

