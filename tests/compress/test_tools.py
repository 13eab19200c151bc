"""`rewrite` and `approve` through the boundary pipeline."""

# Snapshots hold protocol text verbatim, long lines included.
# ruff: noqa: E501

from __future__ import annotations

from typing import Any

from inline_snapshot import snapshot

from kernos.boundary import ToolResult, ToolSpec, call_tool
from kernos.compress import CompressProtocol, Loss, compress_tools, method_text

SOURCE = "one two three four five six seven eight"


def words(text: str) -> int:
    return len(text.split())


def tools(protocol: CompressProtocol) -> dict[str, ToolSpec[Any]]:
    return {spec.name: spec for spec in compress_tools(protocol)}


async def rewrite(protocol: CompressProtocol, args: Any) -> ToolResult:
    return await call_tool(tools(protocol)["rewrite"], args)


async def approve(protocol: CompressProtocol, args: Any) -> ToolResult:
    return await call_tool(tools(protocol)["approve"], args)


async def test_rewrite_records_a_draft_and_answers_with_its_size() -> None:
    protocol = CompressProtocol(SOURCE, tokenizer=words)
    result = await rewrite(
        protocol, {"text": "one two", "losses": [{"content": "three", "reason": "implied"}]}
    )
    assert not result.is_error
    assert result.text == snapshot(
        "Draft 1 recorded: 8 → 2 tokens (75.0% smaller), 1 declared loss(es). A review turn follows."
    )
    assert protocol.latest is not None
    assert protocol.latest.losses == (Loss("three", "implied"),)


async def test_rewrite_reports_growth_as_negative() -> None:
    protocol = CompressProtocol("a b c", tokenizer=words)
    result = await rewrite(protocol, {"text": "a b c d e f", "losses": []})
    assert result.text == snapshot(
        "Draft 1 recorded: 3 → 6 tokens (-100.0% smaller), 0 declared loss(es). A review turn follows."
    )


async def test_unknown_top_level_fields_are_rejected() -> None:
    protocol = CompressProtocol(SOURCE)
    result = await rewrite(protocol, {"text": "x", "losses": [], "notes": "hi"})
    assert result.code == "invalid_arguments"
    assert result.text == snapshot("""\
Invalid arguments for tool `rewrite`:
- `notes`: unknown field; remove it.
Fix these fields and call `rewrite` again.\
""")
    assert protocol.latest is None
    verdict = await approve(protocol, {"verdict": "ok", "extra": 1})
    assert verdict.code == "invalid_arguments"


async def test_extra_fields_inside_a_loss_are_ignored() -> None:
    protocol = CompressProtocol(SOURCE)
    result = await rewrite(
        protocol,
        {"text": "x", "losses": [{"content": "c", "reason": "r", "severity": "low"}]},
    )
    assert not result.is_error
    assert protocol.latest is not None
    assert protocol.latest.losses == (Loss("c", "r"),)


async def test_padded_empty_losses_are_dropped_before_validation() -> None:
    protocol = CompressProtocol(SOURCE)
    padded = [
        {"content": "", "reason": ""},
        {"content": "null", "reason": "None"},
        {"content": " ", "reason": "n/a"},
        {},
        "",
        None,
        {"content": "seven eight", "reason": "restates six"},
    ]
    result = await rewrite(protocol, {"text": "one", "losses": padded})
    assert not result.is_error, result.text
    assert protocol.latest is not None
    assert protocol.latest.losses == (Loss("seven eight", "restates six"),)


async def test_losses_sent_as_json_text_are_read_as_a_list() -> None:
    protocol = CompressProtocol(SOURCE)
    result = await rewrite(protocol, {"text": "one", "losses": "[]"})
    assert not result.is_error, result.text


async def test_half_empty_losses_and_blank_text_are_schema_errors() -> None:
    protocol = CompressProtocol(SOURCE)
    result = await rewrite(protocol, {"text": "x", "losses": [{"content": "kept", "reason": " "}]})
    assert result.code == "invalid_arguments"
    assert "`losses[0].reason`: Value error, must not be blank" in result.text
    result = await rewrite(protocol, {"text": "  \n", "losses": []})
    assert result.code == "invalid_arguments"
    assert "`text`" in result.text
    result = await rewrite(protocol, {"text": "x"})
    assert "`losses`: required field is missing; add it." in result.text
    assert protocol.latest is None


async def test_approve_errors_come_back_as_the_tool_error_text() -> None:
    protocol = CompressProtocol(SOURCE)
    result = await approve(protocol, {"verdict": "fine"})
    assert (result.is_error, result.code, result.stage) == (True, "no_draft", "semantic")
    assert result.text == "Call rewrite before approve: there is no draft to accept"
    await rewrite(protocol, {"text": "one", "losses": []})
    result = await approve(protocol, {"verdict": "fine"})
    assert (result.is_error, result.code) == (True, "not_reviewed")
    assert result.text == snapshot(
        "Draft 1 has not been reviewed yet. End this turn; the review turn arrives next, and you approve there."
    )
    protocol.mark_reviewed(1)
    result = await approve(protocol, {"verdict": "fine"})
    assert not result.is_error
    assert result.text == snapshot("Draft 1 approved. The run ends here.")
    assert protocol.verdict == "fine"
    blank = await approve(protocol, {"verdict": " "})
    assert blank.code == "invalid_arguments"


def test_top_level_schema_is_strict() -> None:
    specs = tools(CompressProtocol(SOURCE))
    rewrite_schema = specs["rewrite"].schema()
    assert rewrite_schema["additionalProperties"] is False
    assert rewrite_schema["required"] == ["text", "losses"]
    assert specs["approve"].schema()["additionalProperties"] is False
    assert specs["approve"].schema()["required"] == ["verdict"]


def test_descriptions_carry_the_three_rules() -> None:
    specs = tools(CompressProtocol(SOURCE))
    for name in ("rewrite", "approve"):
        description = specs[name].description.lower()
        assert "silent regression" in description, name  # declare losses honestly
        assert "never saw the source" in description, name  # the text stands alone
        assert "cancel" in description, name  # a new draft cancels an approval


def test_model_facing_text_sizes_are_pinned() -> None:
    specs = tools(CompressProtocol(SOURCE))
    sizes = {
        "method.md": len(method_text()),
        "rewrite.md": len(specs["rewrite"].description),
        "approve.md": len(specs["approve"].description),
    }
    print(sizes)
    assert sizes == snapshot({"method.md": 6511, "rewrite.md": 963, "approve.md": 671})
