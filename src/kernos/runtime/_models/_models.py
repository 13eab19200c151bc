"""Model strings → pydantic-ai models.

``provider:name`` strings go to pydantic-ai; ``[models.ALIAS]`` tables add an endpoint and a key
variable; ``openai-chat:NAME`` honours ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` so any
OpenAI-compatible server works; ``replay:PATH`` answers from a cassette.

An ``openai-chat`` model is an :class:`~kernos.runtime._models._chat.OpenAIChat`: pydantic-ai's
``OpenAIChatModel`` (and the openai SDK) is made only when pydantic-ai's engine drives it.

Every ``openai-chat`` model on the same endpoint (base URL and key) shares one provider, so one
pooled ``httpx2`` client per process per endpoint carries all their requests. The provider owns
that client: pydantic-ai replaces it when a run starts on another event loop than the one it was
last used on (connections belong to the loop that opened them).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model, infer_model

from kernos.runtime._config._config import Config, ConfigError, NoModelError
from kernos.runtime._models._cassette import CassetteError, ReplayModel
from kernos.runtime._models._chat import OpenAIChat
from kernos.runtime._models._model_errors import ModelTarget, missing_key_variable
from kernos.runtime._secrets import register_env_secrets, register_secrets, register_url_secrets

if TYPE_CHECKING:
    from pydantic_ai.providers.openai import OpenAIProvider

_NO_KEY = "kernos-no-key"  # local OpenAI-compatible servers usually ignore the key

#: one provider (and so one pooled HTTP client) per (base_url, api_key), for the process
_PROVIDERS: dict[tuple[str | None, str], OpenAIProvider] = {}


def shared_provider(base_url: str | None, api_key: str) -> OpenAIProvider:
    """The process's provider for an OpenAI-compatible endpoint, made on first use."""
    provider = _PROVIDERS.get((base_url, api_key))
    if provider is None:
        from pydantic_ai.providers.openai import OpenAIProvider

        provider = _PROVIDERS[base_url, api_key] = OpenAIProvider(
            base_url=base_url, api_key=api_key
        )
    return provider


_KEY_VARIABLES = {
    "openai": "OPENAI_API_KEY",
    "openai-chat": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "google-gla": "GEMINI_API_KEY",
    "groq": "GROQ_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
}


def model_target(name: str, config: Config, model: Model | None = None) -> ModelTarget:
    """Which endpoint and key the model called ``name`` uses, for an error line
    (:func:`kernos.runtime._models._model_errors.model_failure`); ``model`` (built) gives the
    URL."""
    alias = config.models.get(name)
    target = alias.model if alias is not None else name
    provider = target.partition(":")[0]
    key_env = alias.api_key_env if alias is not None and alias.api_key_env else None
    url = model.base_url if model is not None else None
    if alias is not None and alias.base_url:
        url = alias.base_url
    return ModelTarget(
        name=name,
        url=url,
        key_env=key_env or _KEY_VARIABLES.get(provider),
        alias=name if alias is not None else None,
    )


def pick_model_name(explicit: str | None, config: Config, agent_model: str | None = None) -> str:
    """``--model``, else the agent's model, else ``KERNOS_MODEL``, else ``default_model``."""
    for candidate in (explicit, agent_model, os.environ.get("KERNOS_MODEL"), config.default_model):
        if candidate and candidate.strip():
            return candidate.strip()
    raise NoModelError()


def _openai_chat(
    name: str,
    base_url: str | None,
    api_key: str | None,
    retries: int = 2,
    timeout: float = 600.0,
) -> Model:
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
    register_secrets(api_key)
    register_url_secrets(base_url)
    if api_key is None:
        if base_url is None:
            raise ConfigError(
                None,
                "OPENAI_API_KEY",
                f"model openai-chat:{name} needs an API key",
                "export OPENAI_API_KEY, or OPENAI_BASE_URL for a local OpenAI-compatible server",
            )
        api_key = _NO_KEY
    key = api_key

    def build() -> Model:
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.settings import ModelSettings

        settings = ModelSettings(max_retries=retries, timeout=timeout)
        return OpenAIChatModel(name, provider=shared_provider(base_url, key), settings=settings)

    return OpenAIChat(name, base_url, api_key, build, retries=retries, timeout=timeout)


def resolve_model(name: str, config: Config) -> Model:
    """Build the model called ``name`` (a model string or a config alias). An alias's
    ``engine`` is ignored (every model runs on kernos's one loop): said once per alias.

    Raises:
        ConfigError: unknown provider, missing key variable, unreadable cassette.
    """
    model = _resolve(name, config)
    alias = config.models.get(name)
    if alias is not None and alias.engine is not None and name not in _ENGINE_TOLD:
        _ENGINE_TOLD.add(name)
        log.warning(
            "[models.%s] engine = %r is ignored: every model runs on kernos's own loop; "
            "remove the key",
            name,
            alias.engine,
        )
    return model


log = logging.getLogger("kernos.models")
#: the aliases whose ignored ``engine`` key was reported (once per process)
_ENGINE_TOLD: set[str] = set()


def _resolve(name: str, config: Config) -> Model:
    register_env_secrets()  # keys pydantic-ai's providers read themselves (GROQ_API_KEY, ...)
    alias = config.models.get(name)
    if name in config.alias_problems:  # an unset ${ENV} of this alias fails only when it is used
        raise config.alias_problems[name]
    if alias is not None:
        register_url_secrets(alias.base_url)
        key: str | None = None
        if alias.api_key_env:
            key = os.environ.get(alias.api_key_env)
            if key is None:
                raise ConfigError(
                    config.path,
                    f"models.{name}.api_key_env",
                    f"environment variable {alias.api_key_env} is not set",
                    f"export {alias.api_key_env}=...",
                )
            register_secrets(key)
        target = alias.model
        provider, _, model_name = target.partition(":")
        if provider in ("openai-chat", "openai") and (alias.base_url or key):
            return _openai_chat(
                model_name, alias.base_url, key, alias.request_retries, alias.request_timeout
            )
        if alias.base_url:
            raise ConfigError(
                config.path,
                f"models.{name}.base_url",
                f"base_url is supported for openai-chat models, not {provider!r}",
                "use model = 'openai-chat:NAME' for an OpenAI-compatible endpoint",
            )
        name = target
    if name.startswith("replay:"):
        try:
            return ReplayModel(name.removeprefix("replay:"))
        except CassetteError as exc:
            raise ConfigError(None, "model", str(exc), "pass an existing cassette") from None
    provider, sep, model_name = name.partition(":")
    if not sep or not model_name:
        known = ", ".join(sorted(config.models)) or "(none)"
        raise ConfigError(
            config.path,
            "model",
            f"{name!r} is neither a provider:model string nor a configured alias ({known})",
            "use e.g. openai-chat:gpt-5-mini or define [models.NAME]",
        )
    if provider == "openai-chat":
        return _openai_chat(model_name, None, None)
    try:
        return infer_model(name)
    except (UserError, ValueError, ImportError) as exc:
        variable = missing_key_variable(str(exc))
        if variable is not None:
            raise ConfigError(
                None,
                variable,
                f"model {name} needs an API key and {variable} is not set",
                f"export {variable}=..., or use openai-chat:NAME with OPENAI_BASE_URL for a "
                "local OpenAI-compatible server",
            ) from None
        raise ConfigError(
            None, "model", f"cannot use {name!r}: {exc}", "check the model string"
        ) from None
