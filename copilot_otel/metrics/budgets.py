"""`--budgets-file`: monthly AI-credit budgets, per repository pattern, person or team, as metrics.

The file (YAML, or TOML by its ``.toml`` suffix) holds a list of budgets::

    budgets:
      - name: octo-org            # the {budget} label: letters, digits, . _ -
        ai_credits: 5000          # per calendar month (UTC)
        repository: octo-org/*    # optional: a glob on the session's owner/name
        user: mona                # optional: this daemon's resource user.name (OTEL_RESOURCE_ATTRIBUTES)
        team: platform            # optional: its resource attribute team
        warn_at: 0.8              # optional: the share that warns (default 0.8)

Each budget is exposed as ``copilot_budget_ai_credits{budget,...scope}`` (its amount) and
``copilot_budget_warn_ratio{budget}``; the credits of every call in its scope are counted in
``copilot_budget_ai_credits_spent_total{budget}``. Prometheus adds the fleet up: the recording rule
``copilot:budget_ai_credits:month_to_date`` and the alerts in deploy/prometheus hold it against the budget.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from msgspec import Struct

from ..base import boundedyaml
from ..base.parsing import ConfigError
from ..base.regular_files import read_config
from .decimals import DecimalTotals

DEFAULT_WARN_AT = 0.8
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_KEYS = {"name", "ai_credits", "repository", "user", "team", "warn_at"}
USER_ATTRIBUTE, TEAM_ATTRIBUTE = "user.name", "team"


class Budget(Struct, frozen=True):
    """One monthly budget of AI credits and the calls it covers."""

    name: str
    ai_credits: float
    repository: str = ""  # a glob on owner/name; "" covers every repository (and none)
    user: str = ""  # the resource's user.name it covers; "" any
    team: str = ""  # the resource's team; "" any
    warn_at: float = DEFAULT_WARN_AT

    def covers_machine(self, resource: Mapping[str, Any]) -> bool:
        """Whether this daemon's sessions can count: its resource names the budget's user and team."""
        return all(not want or str(resource.get(key, "")) == want
                   for key, want in ((USER_ATTRIBUTE, self.user), (TEAM_ATTRIBUTE, self.team)))

    def covers_repository(self, repository: str) -> bool:
        return not self.repository or fnmatch.fnmatchcase(repository, self.repository)


def load_budgets(path: Path) -> tuple[Budget, ...]:
    """The budgets at ``path``, checked whole; a ConfigError (one line, naming the file) if anything is off."""
    path = Path(path).expanduser()
    where = f"--budgets-file {path}"
    text = read_config(path, where)
    document = _parse(text, toml=path.suffix.lower() == ".toml", where=where)
    if not isinstance(document, dict) or set(document) != {"budgets"} or not isinstance(document["budgets"], list):
        raise ConfigError(f"{where}: expected one key, budgets, holding a list of budgets")
    budgets = tuple(_budget(entry, f"{where}: budget {number}") for number, entry in
                    enumerate(document["budgets"], start=1))
    names = [b.name for b in budgets]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{where}: two budgets are named {name!r}")
    return budgets


def _parse(text: str, *, toml: bool, where: str) -> Any:
    if toml:
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{where}: not valid TOML ({exc})") from None
        except RecursionError:
            raise ConfigError(f"{where}: not valid TOML (nested too deep)") from None
    return boundedyaml.load_config(text, where)


def _budget(entry: Any, where: str) -> Budget:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a mapping with name and ai_credits")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"{where}: name must be 1-64 letters, digits, '.', '_' or '-' (got {name!r})")
    where = f"{where} ({name})"
    unknown = sorted(str(k) for k in entry if k not in _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    amount = entry.get("ai_credits")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 < amount < 1e15:
        raise ConfigError(f"{where}: ai_credits must be a positive number of AI credits a month (got {amount!r})")
    warn_at = entry.get("warn_at", DEFAULT_WARN_AT)
    if isinstance(warn_at, bool) or not isinstance(warn_at, (int, float)) or not 0 < warn_at <= 1:
        raise ConfigError(f"{where}: warn_at must be a share of the budget, above 0 and at most 1 (got {warn_at!r})")
    scope = {}
    for key in ("repository", "user", "team"):
        value = entry.get(key, "")
        if not isinstance(value, str) or len(value) > 256:
            raise ConfigError(f"{where}: {key} must be a string (got {value!r})")
        scope[key] = value
    return Budget(name, float(amount), warn_at=float(warn_at), **scope)


def month_start_ns(now_s: float) -> int:
    """The start of ``now_s``'s calendar month (UTC), in ns since the epoch."""
    moment = datetime.fromtimestamp(now_s, UTC)
    return int(datetime(moment.year, moment.month, 1, tzinfo=UTC).timestamp()) * 1_000_000_000


def progress(budgets: tuple[Budget, ...], resource: Mapping[str, Any], summaries: Iterable[Any],
             now_s: float) -> list[dict]:
    """Each budget's part spent on this machine this month (the web view): the nano AIU of the sessions in
    its scope whose last event is in this calendar month (UTC), the amount, the share and where it warns."""
    start = month_start_ns(now_s)
    recent = [(s.repository or "", s.nano_aiu) for s in summaries if s.last_event_ns >= start and s.nano_aiu]
    out = []
    for budget in budgets:
        here = budget.covers_machine(resource)
        nano = sum(n for repository, n in recent if budget.covers_repository(repository)) if here else 0
        out.append({"name": budget.name, "ai_credits": budget.ai_credits, "warn_at": budget.warn_at,
                    "repository": budget.repository, "user": budget.user, "team": budget.team,
                    "this_machine": here, "nano_aiu": nano, "share": nano / 1e9 / budget.ai_credits})
    return out


class BudgetMeter:
    """The budgets as metrics on a registry: their amounts, and the credits each one's scope spent here."""

    def __init__(self, budgets: tuple[Budget, ...], resource: Mapping[str, Any], registry) -> None:
        from prometheus_client import Counter, Gauge

        self.amount = Gauge("copilot_budget_ai_credits", "Monthly AI-credit budgets (--budgets-file), by scope.",
                            ["budget", "repository_pattern", "user_name", "team"], registry=registry)
        self.warn_ratio = Gauge("copilot_budget_warn_ratio", "The share of each budget at which it warns.",
                                ["budget"], registry=registry)
        self.spent = Counter("copilot_budget_ai_credits_spent", "AI credits of the calls in each budget's scope.",
                             ["budget"], registry=registry)
        self.budgets = budgets
        self._here = tuple(b for b in budgets if b.covers_machine(resource))
        self._decimals = DecimalTotals()  # each budget's counter lands on its rounded sum
        for budget in budgets:
            self.amount.labels(budget.name, budget.repository, budget.user, budget.team).set(budget.ai_credits)
            self.warn_ratio.labels(budget.name).set(budget.warn_at)
        for budget in self._here:
            self.spent.labels(budget.name)  # a series from the start: increase() sees the first spend

    def spend(self, repository: str, credits: float) -> None:
        """Credits of a session in ``repository`` ("" outside one): counted for each budget that covers it."""
        for budget in self._here:
            if budget.covers_repository(repository):
                for part in self._decimals.increments(budget.name, credits):
                    self.spent.labels(budget.name).inc(part)
