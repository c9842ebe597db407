"""A local stand-in for the GitHub Copilot API, for CLIs that predate BYOK providers.

CLI versions before ~1.0.24 have no ``COPILOT_PROVIDER_BASE_URL``; newer ones, pointed at the
Copilot API instead of a BYOK provider, write sessions with ``isByok: false`` (premium-request
``cost``, ``initiator``, ``accountingSnapshot``). Both run offline against this server:

    with CopilotApi() as api:
        env = {**api.env(), "HOME": ..., "COPILOT_MODEL": COPILOT_MODEL}
        # COPILOT_API_URL=http://127.0.0.1:<port>, COPILOT_GITHUB_TOKEN=<dummy>, HTTP(S)_PROXY
        # 1.0.24+: also COPILOT_DEBUG_GITHUB_API_URL=api.url (1.0.102 turns its OTel export off
        # when its GitHub-API calls fail); never COPILOT_OFFLINE (1.0.102 then wants BYOK)

With ``credits="complete"`` (or ``"partial"``: only the calls of even steps) the last chunk of
each completion carries ``copilot_usage`` (``total_nano_aiu``, ``token_details``), the AI credits
the real API reports; the CLI then logs ``copilotUsage`` and ``aiCreditsStatus`` per call.

It answers ``GET /models`` with models the CLI knows (capabilities, limits, billing
multiplier, policy) and serves ``POST /chat/completions`` with the scripted replies and
provider behaviours of tests/support/provider.py (same ``[scenario:...]`` / ``[provider:...]``
markers; it *is* a ``ScriptedProvider`` with more routes, so ``<url>/v1`` also serves as a
BYOK provider). A repository's custom agents are none; every other path gets a 404 JSON
error, and every response carries an ``X-GitHub-Request-Id`` (without one, 0.0.x CLIs take an
error for a firewall's and give up). Every request is logged in ``requests`` (method, path,
header names, body keys), so what each CLI version asks for can be checked.

``env()`` also points ``HTTP(S)_PROXY`` at this server: a request the CLI makes to any other
host (telemetry, the GitHub API, update checks) arrives here as a proxy request, is logged
in ``requests`` with ``proxied=True`` and refused (HTTP 403), so nothing leaves the machine
and the log shows what a CLI version would have contacted.

Loopback only, port 0, and ``close()`` (or leaving the ``with`` block) stops the server and
joins its threads.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field

from tests.support.provider import Ctx, Reply, ScriptedProvider, Usage, _Handler

# not a real token (too short); the CLI only checks the prefix (gho_, ghu_ or github_pat_)
DUMMY_TOKEN = "gho_copilototeldummy"
COPILOT_MODEL = "claude-sonnet-4.5"  # premium, multiplier 1: one user-initiated call costs 1

# id, display name, vendor, family, billing multiplier (premium requests per user-initiated call)
_MODELS = (
    ("claude-sonnet-4.5", "Claude Sonnet 4.5", "Anthropic", "claude-sonnet-4.5", 1.0),
    ("claude-sonnet-4", "Claude Sonnet 4", "Anthropic", "claude-sonnet-4", 1.0),
    ("claude-haiku-4.5", "Claude Haiku 4.5", "Anthropic", "claude-haiku-4.5", 0.33),
    ("gpt-4.1", "GPT-4.1", "Azure OpenAI", "gpt-4.1", 0.0),
    ("gpt-5-mini", "GPT-5 mini", "Azure OpenAI", "gpt-5-mini", 0.0),
)
MULTIPLIERS = {m[0]: m[4] for m in _MODELS}

# AI credits (Copilot's billing unit since 2026-06-01): nano AIU per token, by token type, at
# batch_size 1 (1 credit = 1e9 nano AIU = $0.01; these are $3, $0.30 and $15 per million tokens).
NANO_AIU_PER_TOKEN = {"input": 300_000, "cache_read": 30_000, "output": 1_500_000}
CREDITS = ("none", "complete", "partial")  # copilot_usage: never, on every call, on the calls of even steps


def copilot_usage(model: str, usage: Usage) -> dict:
    """The ``copilot_usage`` field the Copilot API sends with a completion, for this usage."""
    counts = {"input": usage.prompt_tokens - usage.cached_tokens, "cache_read": usage.cached_tokens,
              "output": usage.completion_tokens}
    details = [{"token_type": t, "token_count": n, "batch_size": 1, "cost_per_batch": NANO_AIU_PER_TOKEN[t],
                "model": model}
               for t, n in counts.items() if n > 0]
    return {"total_nano_aiu": sum(n * NANO_AIU_PER_TOKEN[t] for t, n in counts.items() if n > 0),
            "token_details": details}


def model_entry(model_id: str, name: str, vendor: str, family: str, multiplier: float) -> dict:
    """One ``GET /models`` entry, in the shape the Copilot API serves."""
    return {
        "id": model_id,
        "name": name,
        "object": "model",
        "vendor": vendor,
        "version": model_id,
        "preview": False,
        "model_picker_enabled": True,
        "model_picker_category": "versatile",
        "is_chat_default": model_id == COPILOT_MODEL,
        "is_chat_fallback": model_id == "gpt-4.1",
        "capabilities": {
            "object": "model_capabilities",
            "type": "chat",
            "family": family,
            "tokenizer": "o200k_base",
            "limits": {
                "max_context_window_tokens": 200000,
                "max_prompt_tokens": 128000,
                "max_output_tokens": 16000,
                "vision": {"max_prompt_image_size": 3145728, "max_prompt_images": 1,
                           "supported_media_types": ["image/png", "image/jpeg"]},
            },
            "supports": {"streaming": True, "tool_calls": True, "parallel_tool_calls": True, "vision": True,
                         "structured_outputs": True},
        },
        "billing": {"is_premium": multiplier > 0, "multiplier": multiplier, "restricted_to": ["pro", "pro_plus",
                                                                                              "business",
                                                                                              "enterprise"]},
        "policy": {"state": "enabled", "terms": f"Enable access to {name}."},
        "supported_endpoints": ["/chat/completions"],
    }


def models_response() -> dict:
    return {"object": "list", "data": [model_entry(*m) for m in _MODELS]}


# Headers whose values are logged; all others only by name (Authorization never by value).
_LOGGED_VALUES = {"user-agent", "copilot-integration-id", "editor-version", "x-initiator", "openai-intent",
                  "x-interaction-type", "x-github-api-version", "content-type", "accept"}


@dataclass
class ApiRequest:
    """One request the stand-in received (what a CLI version asks the Copilot API for)."""

    method: str
    path: str
    headers: dict[str, str]  # name -> value, or "<set>" for values not logged
    body_keys: list[str] = field(default_factory=list)
    proxied: bool = False  # arrived as a proxy request for another host (refused)
    status: int = 0


class _ApiHandler(_Handler):
    @property
    def _api(self) -> CopilotApi:
        owner = self.server.owner
        assert isinstance(owner, CopilotApi)  # _ApiHandler serves only CopilotApi (its handler_class)
        return owner

    def end_headers(self) -> None:
        # Every GitHub response carries a request id; CLIs treat an error without one as a
        # proxy or firewall in the way and give up (0.0.400: "does not appear to originate
        # from GitHub").
        self.send_header("X-GitHub-Request-Id", "0000:STANDIN:%04X" % (len(self._api.requests) & 0xFFFF))
        super().end_headers()

    def _log(self, proxied: bool = False, body: dict | None = None, status: int = 0) -> ApiRequest:
        headers = {k.lower(): (v if k.lower() in _LOGGED_VALUES else "<set>") for k, v in self.headers.items()}
        entry = ApiRequest(self.command, self.path, headers, sorted(body) if isinstance(body, dict) else [], proxied,
                           status)
        self._api._log_request(entry)
        return entry

    def _refuse_proxy(self) -> None:
        self._log(proxied=True, status=403)
        self._json(403, {"error": {"message": "copilot-otel test stand-in: outbound requests are refused"}})

    def do_CONNECT(self) -> None:  # HTTPS through the proxy: refused
        self._refuse_proxy()

    def _local_path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def do_GET(self) -> None:
        if self.path.startswith(("http://", "https://")):
            self._refuse_proxy()
            return
        path = self._local_path()
        if path == "/v1/models":  # a BYOK CLI (COPILOT_PROVIDER_BASE_URL=<url>/v1): the scripted provider's list
            self._log(status=200)
            super().do_GET()
            return
        if path == "/models":
            self._log(status=200)
            self._json(200, models_response())
            return
        if re.fullmatch(r"/agents/swe/custom-agents/[^/]+/[^/]+", path):  # a repository's custom agents: none
            self._log(status=200)
            self._json(200, {"agents": []})
            return
        for m in _MODELS:
            if path == f"/models/{m[0]}":
                self._log(status=200)
                self._json(200, model_entry(*m))
                return
        self._log(status=404)
        self._json(404, {"error": {"message": f"not found: {path}", "type": "invalid_request_error"}})

    def do_POST(self) -> None:
        if self.path.startswith(("http://", "https://")):
            self._refuse_proxy()
            return
        path = self._local_path()
        if path.endswith("/chat/completions"):
            self._log(status=200)  # the body is the provider's to read; Served records it
            super().do_POST()
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self._log(body=body, status=404)
        self._json(404, {"error": {"message": f"not found: {path}", "type": "invalid_request_error"}})

    def do_PUT(self) -> None:
        self.do_POST()

    def do_PATCH(self) -> None:
        self.do_POST()

    def do_DELETE(self) -> None:
        self._log(status=404)
        self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})


class CopilotApi(ScriptedProvider):
    """The Copilot API stand-in on 127.0.0.1:<ephemeral port> (see the module docstring)."""

    handler_class = _ApiHandler
    stream_by_default = False  # as the real API: 0.0.x CLIs' sub-agents ask without "stream" and read one object

    def __init__(self, host: str = "127.0.0.1", port: int = 0, behaviour: str = "normal",
                 credits: str = "none") -> None:
        assert credits in CREDITS, credits
        super().__init__(host, port, behaviour)
        self.credits = credits
        self.requests: list[ApiRequest] = []
        self._log_lock = threading.Lock()
        self.billed: list[dict] = []  # every copilot_usage sent, in order

    def copilot_usage(self, model: str, reply: Reply, ctx: Ctx | None) -> dict | None:
        """AI credits for this reply, per ``credits``; None: the field is left out (the CLI says unavailable)."""
        if self.credits == "none" or reply.usage is None or (self.credits == "partial" and ctx is not None
                                                             and ctx.step % 2):
            return None
        billed = copilot_usage(model, reply.usage)
        with self._log_lock:
            self.billed.append(billed)
        return billed

    def _log_request(self, entry: ApiRequest) -> None:
        with self._log_lock:
            self.requests.append(entry)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:  # the Copilot API has no /v1 prefix
        return self.url

    def env(self) -> dict[str, str]:
        """What a CLI needs to use this stand-in as its Copilot API (plus the refusing proxy)."""
        return {
            "COPILOT_API_URL": self.url,
            "COPILOT_GITHUB_TOKEN": DUMMY_TOKEN,
            "HTTP_PROXY": self.url,
            "HTTPS_PROXY": self.url,
            "http_proxy": self.url,
            "https_proxy": self.url,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }

    def request_log(self) -> list[dict]:
        with self._log_lock:
            return [vars(r).copy() for r in self.requests]


if __name__ == "__main__":  # manual probing: python -m tests.support.copilot_api [port]
    import sys
    import time

    with CopilotApi(port=int(sys.argv[1]) if len(sys.argv) > 1 else 0) as api:
        print(api.url, flush=True)
        try:
            while True:
                time.sleep(3600)  # the scenario: an answer that never comes
        except KeyboardInterrupt:
            pass
