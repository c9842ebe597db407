"""LLM calls: which reports are new calls, and their chat spans and metrics.

A call can reach the model through two sources at once (a live subscriber gets both the
persisted ``session.usage_record`` and the ephemeral ``assistant.usage``): such a pair is
one call. Two reports from one source are two calls, even with the same ``apiCallId``:
some providers reuse response ids.
"""

from __future__ import annotations

from ..decode.events import Event
from ..decode.payloads import Usage, as_num, as_str
from ..vocab import END_ABORTED, ERROR, SUCCESS, UNKNOWN_MODEL, Metric
from . import attrs as A
from . import spanattrs
from .counts import CallCounts
from .messages import Transcript
from .open_spans import Agent, OpenSpan, Outbox, Turn
from .records import KIND_CLIENT, span_id_for
from .summary import Tally
from .usage import CALLS


class CallBook:
    """Tells each LLM call once, whichever source reports it, and builds its chat span."""

    def __init__(self, session_id: str, out: Outbox, tally: Tally, talk: Transcript) -> None:
        self.session_id = session_id
        self.tally = tally
        self.out = out
        self.talk = talk
        # apiCallId -> reports of that id not yet matched by the other source, per source (event type)
        self._unmatched: dict[str, dict[str, int]] = {}
        # agent id -> [model, accounted] of the call in flight (headless stream: model.call_start .. _finished)
        self._in_flight: dict[str | None, list] = {}
        self.counts = CallCounts(out, tally)
        self.credits = self.counts.credits

    def first_report(self, event: Event, usage: Usage) -> bool:
        """A usage report: True unless it is the other source's report of a call already told."""
        flight = self._in_flight.get(event.agent_id)
        if flight is not None:
            flight[1] = True
        call_id = usage.api_call_id
        if call_id is None:
            return True
        for source, unmatched in self._unmatched.items():
            if source != event.type and unmatched.get(call_id):
                unmatched[call_id] -= 1  # the same call, through the other source
                return False
        unmatched = self._unmatched.setdefault(event.type, {})
        unmatched[call_id] = unmatched.get(call_id, 0) + 1
        return True

    def started(self, event: Event) -> None:
        """model.call_start (live): the agent has a call in flight."""
        previous = self._in_flight.get(event.agent_id)
        model = as_str(event.data.get("model")) or (previous[0] if previous else None)
        self._in_flight[event.agent_id] = [model, False]

    def finished(self, event: Event) -> Usage | None:
        """model.call_finished: the headless stream's only trace of a call that no usage event reported."""
        flight = self._in_flight.pop(event.agent_id, None)
        if flight is None or flight[1] or event.data.get("outcome") != "success":
            return None
        return Usage.known(flight[0], event.data.get("dispatchDurationMs"))

    def failed(self, event: Event) -> tuple[Usage, str]:
        """model.call_failure: a failed attempt the CLI will retry, and why it failed."""
        flight = self._in_flight.pop(event.agent_id, None)
        data = event.data
        usage = Usage.known(as_str(data.get("model")) or (flight[0] if flight else None), data.get("durationMs"))
        return usage, str(data.get("statusCode") or data.get("errorType") or "call_failed")

    def record(self, event: Event, usage: Usage, agent: Agent, parent: OpenSpan, session_model: str | None,
               *, error: str | None = None, nudge: bool = False, end_ns: int | None = None) -> None:
        """Export the chat span of one call, ending at ``event`` (or ``end_ns``), and count it."""
        end_ns = event.timestamp_ns if end_ns is None else end_ns
        model = usage.model or session_model or UNKNOWN_MODEL
        turn = agent.turn
        attributes, tokens = spanattrs.chat(self.session_id, agent.shown, usage, model, None if turn is None else (
            turn.turn_id, turn.span.attributes[A.COPILOT_INTERACTION_ID]))
        provider = attributes.get(A.GEN_AI_PROVIDER_NAME)
        if provider is not None:  # every span of the session names the provider its calls go to
            self.out.shared[A.GEN_AI_PROVIDER_NAME] = provider
        duration_ms = usage.duration_ms
        # The CLI times the call from before it logs turn_start; never start before the parent.
        start = max(end_ns - int(min(max(duration_ms, 0.0) * 1_000_000, end_ns)), parent.start_ns)
        if error is None:
            self.talk.chat(agent.talk, attributes)
        span = parent.child(span_id_for(self.session_id, event.id), f"{A.OP_CHAT} {model}", KIND_CLIENT, start,
                            attributes)
        record = span.close(end_ns, error_type=error)
        if error is not None or not self.talk.hold(agent.talk, record):  # with capture, it waits for its answer
            self.out.span(record)
        tally, totals = self.tally, agent.totals
        if error is None:
            tally.add(model, CALLS, 1)
            totals.llm_calls += 1
            cost = as_num(usage.fields.get("cost"))
            if "cost" in usage.fields:
                totals.cost = (totals.cost or 0.0) + cost
            if usage.fields.get("initiator") == "user" and cost > 0:
                totals.premium_requests += cost
                if nudge:
                    tally.nudge_premium_requests += cost
                    self.out.count(Metric.AUTOPILOT_PREMIUM_REQUESTS, model, value=cost, span=span)
                self.counts.count_premium(model, cost, span)
            self.credits.call(usage, model, totals, nudge=nudge, span=span)
            ttft = usage.fields.get("timeToFirstTokenMs")
            if isinstance(ttft, (int, float)) and not isinstance(ttft, bool) and ttft >= 0:
                self.out.count(Metric.LLM_TIME_TO_FIRST_TOKEN, model, value=as_num(ttft) / 1000.0, span=span)
        else:
            tally.llm_errors += 1
        for label, value in tokens.items():
            totals.tokens[label] = totals.tokens.get(label, 0) + value
        if turn is not None and error is None:
            turn.llm_calls += 1
            turn.truncated = usage.fields.get("finishReason") == "length"
        self.out.count(Metric.LLM_CALLS, model, ERROR if error else SUCCESS, span=span)
        self.out.count(Metric.LLM_CALL_DURATION, model, value=max(duration_ms, 0.0) / 1000.0, span=span)
        for label, value in tokens.items():
            if value > 0:
                self.counts.count_tokens(model, label, value, span)

    def cut_off(self, abort: Event, turns: list[tuple[Agent, Turn]], model: str | None) -> None:
        """The user's abort: a turn of ``turns`` with no call reported and no tool asked for had its LLM call in
        flight (the CLI's own OTel has it as a chat span); it ends aborted, with its turn (or at the abort)."""
        for agent, turn in turns:
            if turn.llm_calls or turn.requested_tools or turn.errored:
                continue
            end_ns = turn.end_ns or abort.timestamp_ns
            usage = Usage.known(model, (end_ns - turn.span.start_ns) / 1e6)
            self.record(abort, usage, agent, turn.span, model, error=END_ABORTED, end_ns=end_ns)
