"""The protocol state machine, pure (the seed's six tests, and ours)."""

from __future__ import annotations

import pytest

from kernos.compress import CompressError, CompressProtocol, Draft, Loss, Metrics

SOURCE = "You are a helpful assistant. Please always answer politely and in full sentences."


def words_counter(text: str) -> int:
    """A transparent tokenizer for tests: one token per word."""
    return len(text.split())


def test_approve_before_any_draft_is_rejected() -> None:
    protocol = CompressProtocol(SOURCE)
    with pytest.raises(CompressError) as caught:
        protocol.accept("looks good")
    assert str(caught.value) == "Call rewrite before approve: there is no draft to accept"
    assert not protocol.approved
    assert protocol.verdict is None


def test_approve_is_gated_on_the_review_of_the_newest_draft() -> None:
    protocol = CompressProtocol(SOURCE)
    protocol.submit("Answer politely.", [])
    with pytest.raises(CompressError) as caught:
        protocol.accept("fine")
    assert str(caught.value) == (
        "Draft 1 has not been reviewed yet. End this turn; the review turn arrives next, "
        "and you approve there."
    )
    assert not protocol.approved
    protocol.mark_reviewed(1)
    assert protocol.accept("fine") == protocol.latest
    assert protocol.approved
    assert protocol.verdict == "fine"


def test_a_new_draft_supersedes_an_approval_and_needs_its_own_review() -> None:
    protocol = CompressProtocol(SOURCE)
    protocol.submit("Answer politely.", [])
    protocol.mark_reviewed(1)
    protocol.accept("fine")
    second = protocol.submit("Answer politely, in full sentences.", [])
    assert second.round == 2
    assert not protocol.approved
    assert protocol.verdict is None
    with pytest.raises(CompressError, match=r"^Draft 2 has not been reviewed yet"):
        protocol.accept("still fine")
    protocol.mark_reviewed(2)
    assert protocol.accept("still fine").round == 2


def test_declared_losses_are_copied() -> None:
    protocol = CompressProtocol(SOURCE)
    losses = [Loss("helpful assistant", "role framing adds nothing")]
    draft = protocol.submit("Answer politely.", losses)
    losses.append(Loss("in full sentences", "oops"))
    losses[0] = Loss("changed", "changed")
    assert draft.losses == (Loss("helpful assistant", "role framing adds nothing"),)
    assert protocol.latest == Draft(1, "Answer politely.", draft.losses)


def test_losses_from_any_object_with_content_and_reason_become_loss_values() -> None:
    class Mutable:
        def __init__(self) -> None:
            self.content, self.reason = "x", "y"

    given = Mutable()
    draft = CompressProtocol(SOURCE).submit("t", [given])
    given.content = "mutated"
    assert draft.losses == (Loss("x", "y"),)
    assert type(draft.losses[0]) is Loss


def test_metrics_report_growth_as_a_negative_ratio() -> None:
    protocol = CompressProtocol("one two three four", tokenizer=words_counter)
    grown = protocol.submit("one two three four five", [])
    assert protocol.metrics(grown) == Metrics(
        source_words=4, draft_words=5, source_tokens=4, draft_tokens=5, ratio=-0.25
    )
    assert protocol.metrics(grown).percent == "-25.0"
    shrunk = protocol.submit("one two three", [])
    assert protocol.metrics(shrunk).ratio == 0.25
    assert protocol.metrics(shrunk).percent == "25.0"


def test_an_empty_source_yields_zero_sizes_instead_of_dividing_by_zero() -> None:
    protocol = CompressProtocol("")
    assert (protocol.source_words, protocol.source_tokens) == (0, 0)
    draft = protocol.submit("something", [])
    m = protocol.metrics(draft)
    assert (m.source_words, m.source_tokens, m.ratio) == (0, 0, 0)
    assert m.draft_tokens > 0
    blank = CompressProtocol("  \n\t ")
    assert blank.source_words == 0


def test_words_are_whitespace_separated_pieces_of_the_trimmed_text() -> None:
    protocol = CompressProtocol("  a  b\n\nc\t", tokenizer=words_counter)
    assert protocol.source_words == 3
    assert protocol.metrics(protocol.submit("   ", [])).draft_words == 0


def test_the_source_is_measured_once() -> None:
    calls: list[str] = []

    def counting(text: str) -> int:
        calls.append(text)
        return len(text)

    protocol = CompressProtocol("abc", tokenizer=counting)
    draft = protocol.submit("ab", [])
    protocol.metrics(draft)
    protocol.metrics(draft)
    assert calls.count("abc") == 1
    assert protocol.source_tokens == 3


def test_reviewed_only_moves_forward_and_state_properties() -> None:
    protocol = CompressProtocol(SOURCE)
    assert (protocol.latest, protocol.rounds, protocol.reviewed) == (None, 0, 0)
    protocol.submit("a", [])
    protocol.submit("b", [])
    protocol.mark_reviewed(2)
    protocol.mark_reviewed(1)
    assert protocol.reviewed == 2
    assert protocol.rounds == 2
    assert [d.round for d in protocol.drafts] == [1, 2]


def test_bytes_tokenizer_is_ceil_of_utf8_bytes_over_four() -> None:
    protocol = CompressProtocol("héllo", tokenizer="bytes")  # 6 bytes → 2
    assert protocol.source_tokens == 2
    assert protocol.metrics(protocol.submit("abcd", [])).draft_tokens == 1


def test_unknown_tokenizer_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown tokenizer 'gpt2'; use one of: o200k, bytes"):
        CompressProtocol("x", tokenizer="gpt2")
