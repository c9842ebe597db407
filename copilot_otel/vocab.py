"""The words every stage shares: live states, interaction ends, signals, outcomes and metric keys.

The label values here are a contract (docs/metrics.md): dashboards and alert rules match on
them. The session model emits them and metrics/registry.py declares the series that carry them, so
each is spelled once, here.
"""

from __future__ import annotations

import enum

MAIN_AGENT = "main"  # copilot_turns_total{agent} of the main agent
UNKNOWN_MODEL = "unknown"  # the model label of a call whose log names no model

# Live states: copilot_sessions{state}. The model knows the first four; the daemon adds the
# last two from the clock and the process table.
WORKING = "working"
WAITING_TOOL = "waiting_tool"
WAITING_USER = "waiting_user"
IDLE = "idle"
STUCK = "stuck"
ABANDONED = "abandoned"
STATES = (WORKING, WAITING_TOOL, WAITING_USER, IDLE, STUCK, ABANDONED)
ENDED = "ended"  # a known session that is not live: shut down, or its process is gone with nothing open
SESSION_STATES = (*STATES, ENDED)  # what `sessions` and the web view name a session
STALLED_STATES = (STUCK, ABANDONED)  # the states that get a copilot_session_stalled_seconds series

# How an interaction ended: github.copilot.interaction.end, and `inspect`.
END_IDLE = "idle"
END_TASK_COMPLETE = "task_complete"
END_ERROR = "error"
END_SHUTDOWN = "shutdown"
END_INCOMPLETE = "incomplete"
END_ABORTED = "aborted"  # the user stopped the loop (Ctrl-C, SIGINT/SIGTERM): `abort`, then idle
LOOP_ENDS = (END_IDLE, END_TASK_COMPLETE, END_ERROR, END_ABORTED)  # each counts one signal="idle"
INTERACTION_ENDS = (*LOOP_ENDS, END_SHUTDOWN, END_INCOMPLETE)  # copilot_interactions_total{end}

INCOMPLETE = "incomplete"  # error.type of a span whose end never came
CANCELLED = "cancelled"  # error.type of a sub-agent cut off by the user's abort

# copilot_completion_signals_total{signal}
SIGNAL_IDLE = "idle"
SIGNAL_TASK_COMPLETE = "task_complete"
SIGNAL_ERROR = "error"
SIGNAL_SHUTDOWN = "shutdown"
SIGNALS = (SIGNAL_IDLE, SIGNAL_TASK_COMPLETE, SIGNAL_ERROR, SIGNAL_SHUTDOWN)

# outcome labels. A tool that never completed counts with its error.type: aborted or incomplete.
SUCCESS = "success"
FAILURE = "failure"  # a tool that ran and failed
ERROR = "error"  # an LLM call that failed

# copilot_tokens_total{type}
TOKEN_TYPES = ("input", "output", "cache_read", "cache_write", "reasoning",
               "compaction_input", "compaction_output", "compaction_cache_read", "compaction_cache_write")

# copilot_code_lines_total{change}: the values of the VCS conventions' vcs.line_change.type
LINES_ADDED = "added"
LINES_REMOVED = "removed"
LINE_CHANGES = (LINES_ADDED, LINES_REMOVED)

# Requests the CLI puts to the person at the terminal: while one is open the session is waiting_user.
USER_REQUESTS = ("permission", "user_input", "elicitation", "exit_plan_mode")


class Metric(enum.Enum):
    """A session metric the model updates; the value is its Prometheus name (metrics/registry.py declares it)."""

    SESSIONS_STARTED = "copilot_sessions_started"
    TURNS = "copilot_turns"
    LLM_CALLS = "copilot_llm_calls"
    TOOL_CALLS = "copilot_tool_calls"
    MCP_TOOL_CALLS = "copilot_mcp_tool_calls"
    AUTOPILOT_NUDGES = "copilot_autopilot_nudges"
    COMPLETION_SIGNALS = "copilot_completion_signals"
    TOKENS = "copilot_tokens"
    TURN_DURATION = "copilot_turn_duration_seconds"
    TOOL_DURATION = "copilot_tool_duration_seconds"
    LLM_CALL_DURATION = "copilot_llm_call_duration_seconds"
    LLM_TIME_TO_FIRST_TOKEN = "copilot_llm_time_to_first_token_seconds"
    INTERACTIONS = "copilot_interactions"
    PREMIUM_REQUESTS = "copilot_premium_requests"
    AUTOPILOT_PREMIUM_REQUESTS = "copilot_autopilot_premium_requests"
    AI_CREDITS = "copilot_ai_credits"
    AUTOPILOT_AI_CREDITS = "copilot_autopilot_ai_credits"
    LLM_CALLS_WITHOUT_CREDITS = "copilot_llm_calls_without_credits"
    CODE_LINES = "copilot_code_lines"
    FILES_MODIFIED = "copilot_files_modified"

    # Members are singletons compared by identity: hash them so too (Enum's own hash is Python code,
    # run for every metric update).
    __hash__ = object.__hash__


# The metrics attributed to a repository: their last label is `repository`, the session's "owner/name"
# ("" outside a repository, or when the daemon runs with --no-repository-label). The model adds it.
ATTRIBUTED = frozenset({Metric.SESSIONS_STARTED, Metric.LLM_CALLS, Metric.TOKENS, Metric.PREMIUM_REQUESTS,
                        Metric.AUTOPILOT_PREMIUM_REQUESTS, Metric.CODE_LINES, Metric.FILES_MODIFIED,
                        Metric.AI_CREDITS, Metric.AUTOPILOT_AI_CREDITS, Metric.LLM_CALLS_WITHOUT_CREDITS})
REPOSITORY_LABEL = "repository"


# aiCreditsStatus: whether a sum of AI credits covers its calls (the CLI's words); a call that reported
# neither an amount nor a status (older CLIs, the headless stream) is unreported.
COMPLETE = "complete"
PARTIAL = "partial"
UNAVAILABLE = "unavailable"
UNREPORTED = "unreported"


# What the model reports about input it could not use (besides what it exports).
DUPLICATE_ID = "duplicate_id"  # an event id seen before: counted as a rejected line
OUT_OF_ORDER = "out_of_order"  # an end whose start is not open: copilot_otel_events_out_of_order_total
# A value from a log that was clamped or cut to be usable: the reasons of copilot_otel_values_clamped_total.
OUT_OF_RANGE = "out_of_range"  # a metric value beyond int64 (or not a number): clamped to int64
TOO_DEEP = "too_deep"  # JSON nested deeper than the parser goes: that part kept as text
CLAMP_REASONS = (OUT_OF_RANGE, TOO_DEEP)

# Why a session log is not read as the user's (source/trust.py): copilot_otel_logs_refused_total{reason}.
REFUSED_OWNER = "owner"  # its folder or the log belongs to another user
REFUSED_OUTSIDE = "outside"  # a link that leads out of session-state
REFUSED_ALIAS = "alias"  # another name of a log already read (a symlink, a bind mount, a hard link)
LOG_REFUSALS = (REFUSED_OWNER, REFUSED_OUTSIDE, REFUSED_ALIAS)
