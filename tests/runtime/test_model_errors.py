"""runtime/_models/_model_errors.py: a failed model request as one line and an exit code (pure)."""

from __future__ import annotations

import socket
import ssl

from pydantic_ai.exceptions import ModelConnectionError, ModelHTTPError, ModelServerError

from kernos.runtime import EmptyAnswers, ModelTarget, model_failure, register_secrets
from kernos.runtime._models._model_errors import missing_key_variable, public_url

TARGET = ModelTarget("m", "https://user:pw@llm.example/v1?key=abc", "MY_KEY", "m")


def _caused(error: Exception, cause: BaseException) -> Exception:
    error.__cause__ = cause
    return error


def test_status_codes_pick_the_exit_code() -> None:
    codes = {}
    for status in (401, 403, 404, 400, 429, 500, 503):
        exc = ModelHTTPError(status, "qwen3", {"message": "nope"})
        failure = model_failure(exc, TARGET)
        assert failure is not None
        codes[status] = failure.exit_code
    assert codes == {401: 2, 403: 2, 404: 2, 400: 1, 429: 1, 500: 1, 503: 1}


def test_the_url_keeps_no_credentials() -> None:
    assert public_url(TARGET.url) == "https://llm.example/v1"
    register_secrets("sk-live-0123456789abcdef")
    exc = ModelHTTPError(401, "qwen3", {"message": "bad key sk-live-0123456789abcdef"})
    failure = model_failure(exc, TARGET)
    assert failure is not None
    assert "sk-live-0123456789abcdef" not in failure.line and "pw" not in failure.line


def test_transport_errors_are_read_from_the_cause() -> None:
    def kind(cause: BaseException) -> str:
        failure = model_failure(_caused(ModelConnectionError("x", "failed"), cause), TARGET)
        assert failure is not None and failure.exit_code == 1
        return failure.kind

    assert kind(ConnectionRefusedError(111, "refused")) == "refused"
    assert kind(socket.gaierror(-2, "Name or service not known")) == "dns"
    assert kind(ssl.SSLError(1, "record layer failure")) == "tls"
    assert kind(TimeoutError()) == "timeout"
    assert kind(OSError("reset")) == "connection"


def test_empty_answers_and_other_errors() -> None:
    failure = model_failure(EmptyAnswers("m", 3), TARGET)
    assert failure is not None and failure.exit_code == 1
    assert "no text and no tool call 3 times" in failure.line
    assert "models.m.empty_retries" in failure.line
    assert model_failure(ValueError("not a model error"), TARGET) is None
    assert model_failure(ModelServerError("x", "boom"), TARGET) is not None


def test_a_providers_key_advice_names_the_variable() -> None:
    advice = "Set the `OPENAI_API_KEY` environment variable or pass it via `OpenAIProvider(...)`"
    assert missing_key_variable(advice) == "OPENAI_API_KEY"
    assert missing_key_variable("something else") is None
