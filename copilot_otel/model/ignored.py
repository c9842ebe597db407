"""The event types of the CLI's schema that the session model knowingly does not read, each with the reason.

Every type in `schemas/session-events.schema.json` of every CLI version kept in tests/fixtures/schemas is either
read (model/sessions.py, HANDLED_TYPES) or listed here (tests/component/test_schema.py checks it): a new CLI
version's new types fail that test until someone decides which they are. `scripts/schema_diff.py` prints what
changed between two versions.
"""

from __future__ import annotations

STREAM = "a live fragment (delta, progress, partial output) of work whose complete event is read"
CONTENT = "model, system or user-interface text: no work to time or count (content reaches spans only through " \
          "the events read, as content capture allows)"
CALL_DETAIL = "a detail of an LLM call that its usage record (or model.call_*) already counts"
SETUP = "session set-up, configuration or user-interface state: no agent work to trace or count"
MCP = "MCP server connection, OAuth or list state: not agent work (its tools are read as tool.execution_*)"
PERMISSION = "how a permission was decided: the wait itself is read from permission.requested / .completed"
CLIENT = "a request to the client that hosts the session (a command, MCP sampling, a client-side tool, a " \
         "schedule): not part of the trace shape (design.md §2)"
FUSION = "an experimental HydraFusion routing or phase record: the model calls it makes are read from their " \
         "usage records"
RUNS = "an ephemeral factory or workflow run signal (never written to the log): not part of the trace shape"
SKILL = "a skill's context or a receipt of its invocation: prompt content (skill.invoked itself is read)"
ACCOUNTING = "an accounting or quota record: what it holds the usage records and shutdown totals already count"
STOPPED = "how the agent loop was stopped (the user's interruption, autopilot giving up): the loop's end is " \
          "read from the abort, the error or the last turn"
MARKER = "an internal marker of the CLI's own state (rewind, truncation, compression, assets, receipts)"

IGNORED: dict[str, str] = {
    **dict.fromkeys((
        "assistant.message_delta", "assistant.streaming_delta", "assistant.reasoning_delta",
        "assistant.tool_call_delta",
        "assistant.server_tool_progress", "tool.execution_partial_result", "tool.execution_progress",
        "tool.shell_output", "hook.progress", "session.managed_plugin_progress"), STREAM),
    **dict.fromkeys((
        "assistant.message_start", "assistant.intent", "assistant.reasoning",
        "session.custom_notification", "ui.ephemeral_query", "session.info", "session.warning",
        "session.title_changed", "session.memory_changed", "session.todos_changed", "session.plan_changed",
        "session.workspace_file_changed", "session.mode_notice_delivered", "pending_messages.modified",
        "human_response.recorded"), CONTENT),
    **dict.fromkeys(("assistant.turn_retry", "model.call_final_result", "prompt_cache_break"), CALL_DETAIL),
    **dict.fromkeys((
        "capabilities.changed", "commands.changed", "session.auto_mode_resolved", "session.auto_tier_recommendation",
        "session.auto_tier_switch_failed", "auto_mode_switch.requested", "auto_mode_switch.completed",
        "session.autopilot_objective_changed", "session.background_tasks_changed",
        "session.canvas.closed", "session.canvas.opened", "session.canvas.recorded", "session.canvas.registry_changed",
        "session.canvas.removed", "session.canvas.unavailable", "session.context_changed", "session.context_cleared",
        "session.custom_agents_updated", "session.extensions.attachments_pushed", "session.extensions_loaded",
        "session.handoff", "session.import_legacy", "session.indexed_search", "session.managed_settings_enforced",
        "session.managed_settings_resolved", "session.mode_changed", "session.model_deselected",
        "session.permission_recovery", "session.permissions_changed", "session.remote_steerable_changed",
        "session.session_limits_changed", "session.skills_loaded", "session.tools_updated", "subagent.configured",
        "tool_search.activated", "sandbox.decision"), SETUP),
    **dict.fromkeys(("agent.interrupted", "session.autopilot_stopped"), STOPPED),
    **dict.fromkeys((
        "mcp.headers_refresh_completed", "mcp.headers_refresh_required", "mcp.oauth_completed",
        "mcp.oauth_recovery_completed", "mcp.oauth_required", "mcp.prompts.list_changed", "mcp.resources.list_changed",
        "mcp.tools.list_changed", "mcp_app.tool_call_complete", "session.mcp_server_needs_reconnect",
        "session.mcp_server_removed", "session.mcp_server_status_changed", "session.mcp_server_tools_loaded",
        "session.mcp_servers_loaded"), MCP),
    **dict.fromkeys((
        "permission.assentDetected", "permission.carriedForward", "permission.contextualAuthorization",
        "permission.messageAuthorization", "permission.messageAuthorizationDegraded",
        "permission.messageAuthorizationRead"), PERMISSION),
    **dict.fromkeys((
        "command.queued", "command.execute", "command.completed", "external_tool.requested", "external_tool.completed",
        "sampling.requested", "sampling.completed", "session.schedule_created", "session.schedule_cancelled",
        "session.schedule_rearmed", "session_limits_exhausted.requested",
        "session_limits_exhausted.completed"), CLIENT),
    **dict.fromkeys((
        "assistant.fusion_phase_activity", "assistant.fusion_phase_completed", "assistant.fusion_phase_failed",
        "assistant.fusion_phase_started", "session.fusion_commit_started", "session.fusion_completed",
        "session.fusion_handoff", "session.fusion_resolved", "session.fusion_route_failed",
        "session.fusion_route_started"), FUSION),
    **dict.fromkeys((
        "factory.run_settled", "factory.run_started", "factory.run_updated", "workflow.run_settled",
        "workflow.run_started", "workflow.run_updated"), RUNS),
    **dict.fromkeys(("skill.context_delivered", "skill.context_delivered_ref", "skill.invoked_ref"), SKILL),
    **dict.fromkeys(("session.quota_observation", "session.usage_info", "session.fusion_change_checkpoint",
                     "session.completion_receipt"), ACCOUNTING),
    **dict.fromkeys(("session.snapshot_rewind", "session.truncation", "session.request_body_compression_disabled",
                     "session.binary_asset"), MARKER),
}

# Written by the CLI although its schema does not list them: what a /compact logs of its own LLM call (1.0.102;
# model.model_call_started / _success are read: the call's chat span under the compaction).
COMPACTION_CALL = "a detail of a /compact's LLM call, whose chat span model.model_call_* already give"
OUTSIDE_SCHEMA: dict[str, str] = dict.fromkeys((
    "model.turn_started", "model.turn_ended", "model.message", "model.response", "model.messages_snapshot"),
    COMPACTION_CALL)
