"""Context compactions: the CLI summarises the conversation in the background, with LLM calls of its own.

Those calls write no usage record, so without this they would appear nowhere. Each compaction
gets a span under the interaction it started in (it runs beside the turns, so not under one),
and its tokens count under their own types (``compaction_input``, ...).
"""

from __future__ import annotations

from ..decode.events import Event
from ..decode.payloads import as_str
from ..vocab import CANCELLED, OUT_OF_ORDER, Metric
from . import attrs as A
from . import spanattrs
from .open_spans import OpenSpan, Outbox
from .records import KIND_CLIENT, KIND_INTERNAL, STATUS_OK, span_id_for, trace_id_for

TOKEN_KEYS = (("inputTokens", "compaction_input"), ("outputTokens", "compaction_output"),
              ("cacheReadTokens", "compaction_cache_read"), ("cacheWriteTokens", "compaction_cache_write"))


class CompactionBook:
    """Open compaction spans by compactionAttemptId."""

    def __init__(self, session_id: str, out: Outbox) -> None:
        self.session_id = session_id
        self.out = out
        self.open: dict[str, OpenSpan] = {}
        self.call_start_ns: int | None = None  # model.model_call_started of a /compact's own LLM call

    def start(self, event: Event, parent: OpenSpan | None) -> None:
        """session.compaction_start, under ``parent`` (None: a /compact between interactions, a root of its own)."""
        attempt = as_str(event.data.get("compactionAttemptId")) or event.id
        attributes = spanattrs.base(A.OP_COMPACTION, self.session_id)
        attributes[A.COPILOT_COMPACTION_TRIGGER] = as_str(event.data.get("trigger")) or "unknown"
        model = as_str(event.data.get("model"))
        if model:
            attributes[A.GEN_AI_REQUEST_MODEL] = model
        span_id = span_id_for(self.session_id, event.id)
        if parent is None:
            self.open[attempt] = OpenSpan(trace_id_for(self.session_id, f"compaction\x00{attempt}"), span_id, None,
                                          A.OP_COMPACTION, KIND_INTERNAL, event.timestamp_ns, attributes)
        else:
            self.open[attempt] = parent.child(span_id, A.OP_COMPACTION, KIND_INTERNAL, event.timestamp_ns, attributes)

    def model_call(self, event: Event) -> None:
        """model.model_call_started / _success that a /compact writes: its LLM call, a chat span under the
        compaction with the tokens of ``responseUsage`` (counted by the compaction's own total, not again)."""
        if event.type == "model.model_call_started":
            self.call_start_ns = event.timestamp_ns
            return
        start_ns, self.call_start_ns = self.call_start_ns, None
        if len(self.open) != 1 or start_ns is None:
            return  # no compaction to hang it under: a model.* event of another kind of work, knowingly left
        parent = next(iter(self.open.values()))
        call = event.data.get("modelCall")
        call = call if isinstance(call, dict) else {}
        model = as_str(call.get("model")) or str(parent.attributes.get(A.GEN_AI_REQUEST_MODEL, "unknown"))
        attributes = spanattrs.base(A.OP_CHAT, self.session_id)
        attributes.update({A.GEN_AI_REQUEST_MODEL: model, A.GEN_AI_RESPONSE_MODEL: model,
                           A.COPILOT_COMPACTION_TRIGGER: parent.attributes.get(A.COPILOT_COMPACTION_TRIGGER)})
        if (api_id := as_str(call.get("api_id"))) is not None:
            attributes[A.GEN_AI_RESPONSE_ID] = api_id
        usage = event.data.get("responseUsage")
        usage = usage if isinstance(usage, dict) else {}
        details = usage.get("prompt_tokens_details")
        for value, attr in ((usage.get("prompt_tokens"), A.GEN_AI_USAGE_INPUT_TOKENS),
                            (usage.get("completion_tokens"), A.GEN_AI_USAGE_OUTPUT_TOKENS),
                            (details.get("cached_tokens") if isinstance(details, dict) else None,
                             A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)):
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                attributes[attr] = value
        span = parent.child(span_id_for(self.session_id, event.id), f"{A.OP_CHAT} {model}", KIND_CLIENT, start_ns,
                            attributes)
        self.out.span(span.close(event.timestamp_ns, status=STATUS_OK))

    def complete(self, event: Event) -> int | None:
        """session.compaction_complete: close its span, count its tokens; its end time (None if not open)."""
        attempt = as_str(event.data.get("compactionAttemptId"))
        span = self.open.pop(attempt, None) if attempt else None
        if span is None:
            self.out.anomaly(OUT_OF_ORDER, event)
            return None
        used = event.data.get("compactionTokensUsed")
        used = used if isinstance(used, dict) else {}
        model = as_str(used.get("model")) or str(span.attributes.get(A.GEN_AI_REQUEST_MODEL, "unknown"))
        span.attributes[A.GEN_AI_REQUEST_MODEL] = model
        for key, label in TOKEN_KEYS:
            value = used.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                span.attributes[f"{A.COPILOT_COMPACTION_TOKENS}.{label.removeprefix('compaction_')}"] = value
                if value:
                    self.out.count(Metric.TOKENS, model, label, value=value)
        requests = used.get("requestCount")
        if isinstance(requests, int) and not isinstance(requests, bool):
            span.attributes[A.COPILOT_COMPACTION_REQUESTS] = requests
        outcome = as_str(event.data.get("outcome"))
        if outcome:
            span.attributes[A.COPILOT_COMPACTION_OUTCOME] = outcome
        if event.data.get("success") is False:
            error = CANCELLED if outcome == CANCELLED else (outcome or "compaction_failed")
            self.out.span(span.close(event.timestamp_ns, error_type=error))
        else:
            self.out.span(span.close(event.timestamp_ns, status=STATUS_OK))
        return event.timestamp_ns

    def cut_off(self, end_ns: int, error_type: str) -> None:
        """The session ended with compactions still running."""
        for span in self.open.values():
            self.out.span(span.close(end_ns, error_type=error_type))
        self.open.clear()
