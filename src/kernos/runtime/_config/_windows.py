"""A model's context window: the one its ``[models.NAME]`` table declares, else the one
genai-prices' bundled data knows for its provider and name, else none (no automatic compaction,
runtime/_session/_compacting.py). Offline: only the data inside the installed ``genai_prices``
package is read (its ``data.py``), never the prices it can fetch at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernos.runtime._config._config_tables import ModelAlias

#: where a window came from
DECLARED = "declared"
KNOWN = "known: genai-prices"

#: a pydantic-ai provider prefix → genai-prices' provider id, where they differ
_PROVIDERS = {
    "openai-chat": "openai",
    "openai-responses": "openai",
    "google-gla": "google",
    "google-vertex": "google",
    "gemini": "google",
    "bedrock": "aws",
    "grok": "x-ai",
    "xai": "x-ai",
}
#: the prefixes whose models honour ``OPENAI_BASE_URL`` (runtime/_models/_models.py)
OPENAI_PREFIXES = frozenset({"openai", "openai-chat", "openai-responses"})


@dataclass(frozen=True)
class ModelWindow:
    """A model's context window in tokens and where it came from (``declared``, ``known:
    genai-prices``); ``window`` ``None``: no window is known, ``0``: declared off."""

    window: int | None
    source: str | None = None

    @property
    def compacts(self) -> bool:
        """Whether a session on this model compacts by itself."""
        return bool(self.window)

    def describe(self) -> str:
        """The window as ``config check`` shows it."""
        if self.window is None:
            return "context window unknown (no automatic compaction; declare context_window)"
        if self.window == 0:
            return "context window 0 (declared: automatic compaction off)"
        return f"context window {self.window} ({self.source})"


@cache
def _snapshot() -> Any:
    from genai_prices import data
    from genai_prices.data_snapshot import DataSnapshot

    return DataSnapshot(providers=data.providers, from_auto_update=False)


def known_window(provider: str, model: str, base_url: str | None = None) -> int | None:
    """The context window genai-prices' bundled data gives ``model`` (its name without the
    prefix) of ``provider`` (a pydantic-ai prefix: ``openai-chat``, ``anthropic``, ...); with
    ``base_url``, the provider is the one whose API that URL is (none for a local server).
    ``None`` when the data does not know the provider, the model or its window."""
    if not model:
        return None
    provider_id = None if base_url else _PROVIDERS.get(provider, provider)
    try:
        _, info = _snapshot().find_provider_model(model, None, provider_id, base_url)
    except LookupError:
        return None
    window = info.context_window
    return window if isinstance(window, int) and window > 0 else None


def model_window(
    name: str, alias: ModelAlias | None, openai_base_url: str | None = None
) -> ModelWindow:
    """The window of the model called ``name`` (``alias`` its ``[models.NAME]`` table, if it
    has one): the declared ``context_window`` wins (``0``: off), else genai-prices' for its model
    string on its endpoint (``alias.base_url``, else ``openai_base_url`` for the prefixes that
    honour ``OPENAI_BASE_URL``)."""
    if alias is not None and alias.context_window is not None:
        return ModelWindow(alias.context_window, DECLARED)
    target = alias.model if alias is not None else name
    provider, sep, model = target.partition(":")
    if not sep or provider == "replay":
        return ModelWindow(None)
    base_url = alias.base_url if alias is not None else None
    if base_url is None and provider in OPENAI_PREFIXES:
        base_url = openai_base_url
    window = known_window(provider, model, base_url)
    return ModelWindow(window, KNOWN if window is not None else None)
