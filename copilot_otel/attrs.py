"""Span attribute names: OpenTelemetry GenAI semantic conventions, and our copilot.* ones."""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _gen_ai
from opentelemetry.semconv.attributes import error_attributes as _error
from opentelemetry.semconv.attributes import http_attributes as _http

GEN_AI_OPERATION_NAME = _gen_ai.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME = _gen_ai.GEN_AI_PROVIDER_NAME
GEN_AI_CONVERSATION_ID = _gen_ai.GEN_AI_CONVERSATION_ID
GEN_AI_AGENT_NAME = _gen_ai.GEN_AI_AGENT_NAME
GEN_AI_REQUEST_MODEL = _gen_ai.GEN_AI_REQUEST_MODEL
GEN_AI_RESPONSE_MODEL = _gen_ai.GEN_AI_RESPONSE_MODEL
GEN_AI_RESPONSE_FINISH_REASONS = _gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
GEN_AI_USAGE_INPUT_TOKENS = _gen_ai.GEN_AI_USAGE_INPUT_TOKENS
GEN_AI_USAGE_OUTPUT_TOKENS = _gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = _gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = _gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
GEN_AI_TOOL_NAME = _gen_ai.GEN_AI_TOOL_NAME
GEN_AI_TOOL_CALL_ID = _gen_ai.GEN_AI_TOOL_CALL_ID
GEN_AI_TOOL_TYPE = _gen_ai.GEN_AI_TOOL_TYPE
GEN_AI_TOOL_CALL_ARGUMENTS = _gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS
GEN_AI_TOOL_CALL_RESULT = _gen_ai.GEN_AI_TOOL_CALL_RESULT
GEN_AI_INPUT_MESSAGES = _gen_ai.GEN_AI_INPUT_MESSAGES
GEN_AI_OUTPUT_MESSAGES = _gen_ai.GEN_AI_OUTPUT_MESSAGES
ERROR_TYPE = _error.ERROR_TYPE
HTTP_RESPONSE_STATUS_CODE = _http.HTTP_RESPONSE_STATUS_CODE
PROCESS_EXIT_CODE = "process.exit.code"

OP_INVOKE_AGENT = _gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
OP_CHAT = _gen_ai.GenAiOperationNameValues.CHAT.value
OP_EXECUTE_TOOL = _gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
PROVIDER = "github"
AGENT_NAME = "copilot"
TURN_SPAN = "turn"  # one name for every turn (bounded span names); its number is in the turn id attribute

COPILOT_TURN_ID = "copilot.turn.id"
COPILOT_INTERACTION_ID = "copilot.interaction.id"
COPILOT_INTERACTION_END = "copilot.interaction.end"
COPILOT_ABORT_REASON = "copilot.abort.reason"
COPILOT_RUNNING = "copilot.running"  # only on `inspect`'s snapshots of open spans, never exported
COPILOT_AUTOPILOT_CONTINUATION = "copilot.autopilot.continuation"
COPILOT_CWD = "copilot.cwd"
COPILOT_CLI_VERSION = "copilot.cli.version"
COPILOT_COST = "copilot.cost"
COPILOT_TTFT_MS = "copilot.time_to_first_token_ms"
COPILOT_INITIATOR = "copilot.initiator"
COPILOT_TASK_SUMMARY = "copilot.task.summary"
COPILOT_TASK_SUCCESS = "copilot.task.success"
COPILOT_SUBAGENT_TOTAL_TOKENS = "copilot.subagent.total_tokens"
COPILOT_SUBAGENT_TOOL_CALLS = "copilot.subagent.tool_calls"
COPILOT_TRIGGER = "copilot.trigger"  # what started an interaction's root when no prompt did (system.notification)
COPILOT_COMPACTION_TRIGGER = "copilot.compaction.trigger"
COPILOT_COMPACTION_OUTCOME = "copilot.compaction.outcome"
COPILOT_COMPACTION_REQUESTS = "copilot.compaction.requests"
COPILOT_COMPACTION_TOKENS = "copilot.compaction.tokens"  # .input, .output, .cache_read, .cache_write

# usage_record key -> (span attribute, copilot_tokens_total{type} label)
USAGE_TOKENS = (
    ("inputTokens", GEN_AI_USAGE_INPUT_TOKENS, "input"),
    ("outputTokens", GEN_AI_USAGE_OUTPUT_TOKENS, "output"),
    ("cacheReadTokens", GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, "cache_read"),
    ("cacheWriteTokens", GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, "cache_write"),
)
USAGE_EXTRAS = (
    ("cost", COPILOT_COST),
    ("timeToFirstTokenMs", COPILOT_TTFT_MS),
    ("initiator", COPILOT_INITIATOR),
)
