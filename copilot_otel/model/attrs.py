"""Span attribute names: OpenTelemetry semantic conventions (GenAI, VCS), the Copilot CLI's own
``github.copilot.*`` keys where the meaning is the same, and under the same ``github.copilot.*`` prefix the
rest: one namespace for everything custom, none inside ``gen_ai.*``. Durations are in seconds.

README "Span attributes" maps each key to what the CLI's own telemetry calls it.
"""

from __future__ import annotations

# The conventions' names as literals: importing opentelemetry.semconv cost every start about 70 M instructions
# (issue 25); tests/unit/test_attrs_semconv.py checks each against the pinned semconv package.

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"  # seconds
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"  # as the CLI's own export names it
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
ERROR_TYPE = "error.type"
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
EXCEPTION_EVENT = "exception"  # the span event every trace backend shows as the error
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
PROCESS_EXIT_CODE = "process.exit.code"
# Where the session runs: the VCS conventions (vcs.repository.name is the name alone, the owner apart).
VCS_REPOSITORY_NAME = "vcs.repository.name"
VCS_OWNER_NAME = "vcs.owner.name"
VCS_REPOSITORY_URL_FULL = "vcs.repository.url.full"
VCS_PROVIDER_NAME = "vcs.provider.name"
VCS_REF_HEAD_NAME = "vcs.ref.head.name"
VCS_REF_HEAD_TYPE = "vcs.ref.head.type"
VCS_REF_HEAD_REVISION = "vcs.ref.head.revision"

OP_INVOKE_AGENT = "invoke_agent"
OP_CHAT = "chat"
OP_EXECUTE_TOOL = "execute_tool"
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
COPILOT_PERMISSION_RESULT = "github.copilot.permission.result"  # how a permission was answered (approved, denied...)
# Ours, under the CLI's prefix: what its telemetry has no key for.
# The reasoning effort of a call: the CLI writes it as gen_ai.request.reasoning.level, a key no convention has.
COPILOT_REASONING_LEVEL = "github.copilot.reasoning.level"
COPILOT_INTERACTION_END = "github.copilot.interaction.end"
# The CLI's own success flag of a tool call: true for a command that exited non-zero, which the span's status
# and error.type call failed (as the CLI shows it).
COPILOT_TOOL_SUCCESS = "github.copilot.tool.success"
COPILOT_RUNNING = "github.copilot.running"  # a snapshot of a span still open (inspect; a stuck session's export)
COPILOT_AUTOPILOT_CONTINUATION = "github.copilot.autopilot.continuation"
COPILOT_CLI_VERSION = "github.copilot.cli.version"
COPILOT_PREMIUM_REQUESTS = "github.copilot.premium_requests"  # sum of cost over user-initiated calls
# partial or unavailable: the amount is not the whole cost
COPILOT_AI_CREDITS_STATUS = "github.copilot.ai_credits.status"
COPILOT_LLM_CALLS = "github.copilot.llm_calls"
COPILOT_TOOL_CALLS = "github.copilot.tool_calls"
COPILOT_TASK_SUMMARY = "github.copilot.task.summary"
COPILOT_TASK_SUCCESS = "github.copilot.task.success"
COPILOT_SUBAGENT_TOTAL_TOKENS = "github.copilot.subagent.total_tokens"
COPILOT_SUBAGENT_TOOL_CALLS = "github.copilot.subagent.tool_calls"
# Seconds a tool waited on a person (permission prompts): not its own run time, which its duration metric counts.
COPILOT_TOOL_USER_WAIT = "github.copilot.tool.user_wait.duration"
COPILOT_PERMISSION_EVENT = "github.copilot.permission"  # a span event per permission asked: when answered, how, wait
COPILOT_PERMISSION_WAIT = "github.copilot.permission.wait.duration"  # seconds, on that event
# what started an interaction's root when no prompt did (system.notification)
COPILOT_TRIGGER = "github.copilot.trigger"
COPILOT_COMPACTION_TRIGGER = "github.copilot.compaction.trigger"
COPILOT_COMPACTION_OUTCOME = "github.copilot.compaction.outcome"
COPILOT_COMPACTION_REQUESTS = "github.copilot.compaction.requests"
COPILOT_COMPACTION_TOKENS = "github.copilot.compaction.tokens"  # .input, .output, .cache_read, .cache_write

# Hooks (hook.start .. hook.end): a span each, with the CLI's own keys (it exports them as span events).
HOOK_SPAN = "hook"  # the span's name: "hook <hookType>"
COPILOT_HOOK_TYPE = "github.copilot.hook.type"
COPILOT_HOOK_INVOCATION_ID = "github.copilot.hook.invocation_id"
COPILOT_HOOK_OUTCOME = "github.copilot.hook.outcome"  # allow, deny, block, success, failure
COPILOT_HOOK_REASON = "github.copilot.hook.reason"  # the hook's reason for a deny or block (content capture only)
COPILOT_HOOK_DENIED_BY = "github.copilot.hook.denied_by"  # on a tool span: the type of the hook that denied it
COPILOT_HOOK_BLOCKED_BY = "github.copilot.hook.blocked_by"  # on an invoke_agent span: the hook that blocked its stop
# Skills: the conventions' name on the `skill` tool span; the CLI's span event for each skill.invoked.
GEN_AI_SKILL_NAME = "gen_ai.skill.name"
COPILOT_SKILL_INVOKED = "github.copilot.skill.invoked"
COPILOT_SKILL_TRIGGER = "github.copilot.skill.invocation_trigger"
COPILOT_SKILL_SOURCE = "github.copilot.skill.source"
COPILOT_TOOL_USER_REQUESTED = "github.copilot.tool.user_requested"  # a command the user ran (`!cmd`), not the model
COPILOT_MCP_SERVER_NAME = "github.copilot.mcp.server.name"  # the MCP server of a tool (mcpServerName)

# usage_record key -> (span attribute, copilot_tokens_total{type} label)
USAGE_TOKENS = (
    ("inputTokens", GEN_AI_USAGE_INPUT_TOKENS, "input"),
    ("outputTokens", GEN_AI_USAGE_OUTPUT_TOKENS, "output"),
    ("cacheReadTokens", GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, "cache_read"),
    ("cacheWriteTokens", GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, "cache_write"),
    ("reasoningTokens", GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, "reasoning"),  # a part of outputTokens
)
USAGE_EXTRAS = (  # usage_record key -> span attribute, as logged
    ("apiCallId", GEN_AI_RESPONSE_ID),
    ("reasoningEffort", COPILOT_REASONING_LEVEL),
    ("cost", COPILOT_COST),
    ("initiator", COPILOT_INITIATOR),
)
