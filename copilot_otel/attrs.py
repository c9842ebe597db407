"""Span attribute names: OpenTelemetry semantic conventions (GenAI, VCS), the Copilot CLI's own
``github.copilot.*`` keys where the meaning is the same, and ``copilot.*`` for the rest.

README "Span attributes" maps each key to what the CLI's own telemetry calls it.
"""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _gen_ai
from opentelemetry.semconv._incubating.attributes import vcs_attributes as _vcs
from opentelemetry.semconv.attributes import error_attributes as _error
from opentelemetry.semconv.attributes import exception_attributes as _exception
from opentelemetry.semconv.attributes import http_attributes as _http

GEN_AI_OPERATION_NAME = _gen_ai.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME = _gen_ai.GEN_AI_PROVIDER_NAME
GEN_AI_CONVERSATION_ID = _gen_ai.GEN_AI_CONVERSATION_ID
GEN_AI_AGENT_NAME = _gen_ai.GEN_AI_AGENT_NAME
GEN_AI_REQUEST_MODEL = _gen_ai.GEN_AI_REQUEST_MODEL
GEN_AI_RESPONSE_MODEL = _gen_ai.GEN_AI_RESPONSE_MODEL
GEN_AI_RESPONSE_FINISH_REASONS = _gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
GEN_AI_RESPONSE_ID = _gen_ai.GEN_AI_RESPONSE_ID
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = _gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK  # seconds
GEN_AI_REQUEST_REASONING_LEVEL = "gen_ai.request.reasoning.level"  # the CLI's key; no convention has one yet
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
EXCEPTION_TYPE = _exception.EXCEPTION_TYPE
EXCEPTION_MESSAGE = _exception.EXCEPTION_MESSAGE
EXCEPTION_EVENT = "exception"  # the span event every trace backend shows as the error
HTTP_RESPONSE_STATUS_CODE = _http.HTTP_RESPONSE_STATUS_CODE
PROCESS_EXIT_CODE = "process.exit.code"
# Where the session runs: the VCS conventions (vcs.repository.name is the name alone, the owner apart).
VCS_REPOSITORY_NAME = _vcs.VCS_REPOSITORY_NAME
VCS_OWNER_NAME = _vcs.VCS_OWNER_NAME
VCS_REPOSITORY_URL_FULL = _vcs.VCS_REPOSITORY_URL_FULL
VCS_PROVIDER_NAME = _vcs.VCS_PROVIDER_NAME
VCS_REF_HEAD_NAME = _vcs.VCS_REF_HEAD_NAME
VCS_REF_HEAD_TYPE = _vcs.VCS_REF_HEAD_TYPE
VCS_REF_HEAD_REVISION = _vcs.VCS_REF_HEAD_REVISION

OP_INVOKE_AGENT = _gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
OP_CHAT = _gen_ai.GenAiOperationNameValues.CHAT.value
OP_EXECUTE_TOOL = _gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
# A context compaction: the CLI's own LLM requests that summarise the conversation. No GenAI operation names
# it, and it is no `chat` call (no usage record, no chat span in the CLI's own OTel): an operation of its own.
OP_COMPACTION = "compaction"
PROVIDER = "github"  # the Copilot API; a BYOK provider is named by its kind (spanattrs.provider_name)
AGENT_NAME = "copilot"
TURN_SPAN = "turn"  # one name for every turn (bounded span names); its number is in the turn id attribute

# The Copilot CLI's own keys (its OTel export), used with the same meaning.
COPILOT_TURN_ID = "github.copilot.turn_id"
COPILOT_INTERACTION_ID = "github.copilot.interaction_id"
COPILOT_ABORT_REASON = "github.copilot.abort_reason"
COPILOT_CWD = "github.copilot.cwd"
COPILOT_COST = "github.copilot.cost"  # a call's premium multiplier; on an invoke_agent span, the sum over its calls
COPILOT_INITIATOR = "github.copilot.initiator"  # user, agent or sub-agent
COPILOT_NANO_AIU = "github.copilot.nano_aiu"  # a call's AI credits, nano AIU (1e9 = 1 credit); invoke_agent: the sum
COPILOT_TURN_COUNT = "github.copilot.turn_count"
COPILOT_GIT_REPOSITORY = "github.copilot.git.repository"  # "owner/name"
COPILOT_GIT_BRANCH = "github.copilot.git.branch"
COPILOT_GIT_COMMIT_SHA = "github.copilot.git.commit_sha"
COPILOT_GITHUB_ORG = "github.copilot.github.org"
COPILOT_ERROR_TYPE = "github.copilot.error_type"  # on the exception event of a session.error
COPILOT_ERROR_CODE = "github.copilot.error_code"
COPILOT_ERROR_STATUS_CODE = "github.copilot.error_status_code"
# Ours: what the CLI's telemetry has no key for.
COPILOT_INTERACTION_END = "copilot.interaction.end"
COPILOT_RUNNING = "copilot.running"  # a snapshot of a span still open (inspect; a stuck session's export)
COPILOT_AUTOPILOT_CONTINUATION = "copilot.autopilot.continuation"
COPILOT_CLI_VERSION = "copilot.cli.version"
COPILOT_PREMIUM_REQUESTS = "copilot.premium_requests"  # sum of cost over user-initiated calls
COPILOT_AI_CREDITS_STATUS = "copilot.ai_credits.status"  # partial or unavailable: the amount is not the whole cost
COPILOT_LLM_CALLS = "copilot.llm_calls"
COPILOT_TOOL_CALLS = "copilot.tool_calls"
COPILOT_TASK_SUMMARY = "copilot.task.summary"
COPILOT_TASK_SUCCESS = "copilot.task.success"
COPILOT_SUBAGENT_TOTAL_TOKENS = "copilot.subagent.total_tokens"
COPILOT_SUBAGENT_TOOL_CALLS = "copilot.subagent.tool_calls"
# Milliseconds a tool waited on a person (permission prompts): not its own run time, which its duration metric counts.
COPILOT_TOOL_USER_WAIT_MS = "copilot.tool.user_wait_ms"
COPILOT_PERMISSION_EVENT = "copilot.permission"  # a span event per permission asked: when answered, how, wait
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
USAGE_EXTRAS = (  # usage_record key -> span attribute, as logged
    ("apiCallId", GEN_AI_RESPONSE_ID),
    ("reasoningEffort", GEN_AI_REQUEST_REASONING_LEVEL),
    ("cost", COPILOT_COST),
    ("initiator", COPILOT_INITIATOR),
)
