"""``openai-chat`` models, made without importing the openai SDK.

kernos's loop drives an ``openai-chat`` model over its own pooled client
(:mod:`kernos.runtime._models._lean_wire`); only a program that hands the model to pydantic-ai
itself needs pydantic-ai's ``OpenAIChatModel``, and the openai SDK under it costs about a third of a
second of imports. :class:`OpenAIChat` is the model as every layer sees it, a pydantic-ai
:class:`~pydantic_ai.models.wrapper.WrapperModel` (so pydantic-ai finds every hook it calls
forwarded), whose ``OpenAIChatModel`` is made the first time something reaches for it. A session
never does: ``kernos run`` and ``kernos worker`` start without the SDK.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai.models import Model
from pydantic_ai.models.wrapper import WrapperModel

#: where the openai SDK sends requests when no base URL is given
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIChat(WrapperModel):
    """``openai-chat:NAME`` on an endpoint; ``build`` makes pydantic-ai's ``OpenAIChatModel`` for
    it, once, when pydantic-ai first needs it (:attr:`wrapped`)."""

    def __init__(
        self,
        name: str,
        base_url: str | None,
        api_key: str,
        build: Callable[[], Model],
        *,
        retries: int = 2,
        timeout: float = 600.0,
    ) -> None:
        Model.__init__(self)
        self.chat_name = name
        #: retries of one request (429, 5xx, connection errors) and seconds per attempt
        self.retries = retries
        self.timeout = timeout
        self.endpoint_url = (base_url or DEFAULT_BASE_URL).rstrip("/") + "/"
        self.api_key = api_key
        self._build = build
        self._built: Model | None = None

    @property
    def wrapped(self) -> Model:
        """pydantic-ai's ``OpenAIChatModel`` for this endpoint, made on first use."""
        if self._built is None:
            self._built = self._build()
        return self._built

    @wrapped.setter
    def wrapped(self, model: Model) -> None:
        self._built = model

    @property
    def built(self) -> bool:
        """Whether pydantic-ai's model (and so the openai SDK) was made."""
        return self._built is not None

    @property
    def model_name(self) -> str:
        return self.chat_name

    @property
    def system(self) -> str:
        return "openai"

    @property
    def base_url(self) -> str:
        return self.endpoint_url

    def lean_profile(self) -> dict[str, Any]:
        """What the lean engine reads of this model's profile to shape tool schemas, as
        pydantic-ai's OpenAI provider sets it (a test pins the two against the built model's)."""
        from pydantic_ai.profiles import openai as profiles

        profile = profiles.openai_model_profile(self.chat_name)
        transformer = (
            profiles.OpenAIJsonSchemaTransformer
            if self.chat_name.startswith("ft:")
            else profiles._OpenAIJsonSchemaTransformer
        )
        return {
            "json_schema_transformer": transformer,
            "openai_supports_strict_tool_definition": profile.get(
                "openai_supports_strict_tool_definition", True
            ),
        }

    # identity, not the dataclass's field-wise comparison (which would make the model to compare)
    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"OpenAIChat({self.chat_name!r}, base_url={self.endpoint_url!r})"


def inner_layer(layer: Model) -> Model | None:
    """The model ``layer`` wraps, for a walk through a model's layers; ``None`` at the last one.
    An :class:`OpenAIChat` is a last layer: walking into it would make its pydantic-ai model."""
    if isinstance(layer, WrapperModel) and not isinstance(layer, OpenAIChat):
        return layer.wrapped
    return None
