"""The workspace policy (docs/architecture.md): model-supplied paths resolve to real regular files
inside the roots, never into kernos's state, its config, system pseudo-files or hidden paths; size
is capped before a byte is read; URLs are never taken unless a channel opts in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kernos.runtime import ConfigError, WorkspacePolicy, WorkspaceRefused, load_config
from kernos.runtime._config._workspace import path_problem


def refusal(policy: WorkspacePolicy, path: str, **kw: object) -> str:
    with pytest.raises(WorkspaceRefused) as caught:
        policy.resolve(path, **kw)  # type: ignore[arg-type]
    return str(caught.value)


# -- the pure rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("real", "expected"),
    [
        ("/srv/app/report.pdf", None),
        ("/srv/app", None),  # the root itself: the file-type check refuses it later
        ("/srv/application/x", "outside"),  # a prefix of the name is not inside
        ("/etc/passwd", "outside"),
        ("/srv/app/state/kernos.db", "denied"),
        ("/srv/app/kernos.toml", "denied"),
        ("/srv/app/.env", "hidden"),
        ("/srv/app/docs/.git/config", "hidden"),
    ],
)
def test_the_rule_is_pure(real: str, expected: str | None) -> None:
    denied = ("/srv/app/state", "/srv/app/kernos.toml")
    assert path_problem(real, ("/srv/app",), denied, allow_hidden=False) == expected


def test_hidden_counts_below_the_root_only_and_can_be_allowed() -> None:
    roots = ("/home/u/.cache/ws",)
    assert path_problem("/home/u/.cache/ws/a.txt", roots, (), allow_hidden=False) is None
    assert path_problem("/home/u/.cache/ws/.env", roots, (), allow_hidden=True) is None
    assert path_problem("/proc/self/environ", ("/",), (), allow_hidden=True) == "system"


# -- paths on a real file system ----------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ws" / "sub").mkdir(parents=True)
    (tmp_path / "ws" / "sub" / "report.txt").write_text("report")
    (tmp_path / "outside.txt").write_text("secret")
    return tmp_path / "ws"


def test_a_file_inside_a_root_resolves_to_its_real_path(root: Path) -> None:
    policy = WorkspacePolicy((root,))
    real = (root / "sub" / "report.txt").resolve()
    assert policy.resolve("sub/report.txt") == real  # relative: against the first root
    assert policy.resolve(str(root / "sub" / "report.txt")) == real
    assert policy.resolve(real.as_uri()) == real
    assert policy.resolve("file://localhost" + quote(str(real))) == real
    assert policy.resolve("sub/./../sub/report.txt") == real


def test_the_refusal_names_the_path_the_roots_and_what_to_do(root: Path) -> None:
    policy = WorkspacePolicy((root,))
    assert refusal(policy, "/etc/passwd", what="attachment") == (
        f"attachment refused: /etc/passwd is outside the workspace (roots: {root.resolve()}); "
        "send a file inside it"
    )


def test_escapes_are_refused(root: Path) -> None:
    policy = WorkspacePolicy((root,))
    (root / "out").symlink_to(root.parent / "outside.txt")
    (root / "outdir").symlink_to(root.parent)
    for path in ["../outside.txt", "sub/../../outside.txt", "out", "outdir/outside.txt"]:
        assert "is outside the workspace" in refusal(policy, path), path
    assert "is outside the workspace" in refusal(policy, (root.parent / "outside.txt").as_uri())


def test_nothing_outside_can_be_probed_for_existence(root: Path) -> None:
    policy = WorkspacePolicy((root,))
    assert "outside the workspace" in refusal(policy, "/no/such/file")
    assert "does not exist" in refusal(policy, "sub/missing.txt")
    (root / "dangling").symlink_to(root.parent / "gone.txt")
    assert "outside the workspace" in refusal(policy, "dangling")


def test_state_config_system_and_hidden_paths_are_refused_inside_a_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("KEY")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "kernos.db").write_text("db")
    (tmp_path / "kernos.toml").write_text("")
    (tmp_path / ".env").write_text("A=1")
    policy = WorkspacePolicy((tmp_path,), (tmp_path / "state", tmp_path / "kernos.toml"))
    assert "is a hidden path" in refusal(policy, "~/.ssh/id_ed25519")
    assert "is a hidden path" in refusal(policy, ".env")
    assert "kernos's own state or configuration" in refusal(policy, "state/kernos.db")
    assert "kernos's own state or configuration" in refusal(policy, "kernos.toml")
    (tmp_path / "db-link").symlink_to(tmp_path / "state" / "kernos.db")
    assert "kernos's own state or configuration" in refusal(policy, "db-link")
    everything = WorkspacePolicy((Path("/"),))
    assert "is a system file" in refusal(everything, "/proc/self/environ")
    assert "is a system file" in refusal(everything, "file:///proc/self/environ")
    allowed = WorkspacePolicy((tmp_path,), allow_hidden=True)
    assert allowed.resolve(".env") == (tmp_path / ".env").resolve()


def test_only_regular_files_are_admitted(root: Path) -> None:
    os.mkfifo(root / "pipe")
    policy = WorkspacePolicy((root,))
    assert "is not a regular file" in refusal(policy, "pipe")  # refused without opening: no hang
    assert "is not a regular file" in refusal(policy, "sub")
    assert "is not a regular file" in refusal(policy, ".")


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("", "the path is empty"),
        ("   ", "the path is empty"),
        ("a\x00b", "is not a valid path"),
        ("file://evil.example/etc/passwd", "names another host"),
        ("file://", "names no file"),
        ("http://127.0.0.1/x", "is a URL, not a path"),
        ("ftp://host/x", "is a URL, not a path"),
        ("x" * 5000, "x…"),  # shown shortened; still refused
    ],
)
def test_bad_paths_are_refused_with_a_sentence(root: Path, path: str, fragment: str) -> None:
    message = refusal(WorkspacePolicy((root,)), path)
    assert message.startswith("path refused: ") and fragment in message
    assert len(message) < 400


def test_urls_are_taken_only_when_the_channel_opts_in(root: Path) -> None:
    policy = WorkspacePolicy((root,))
    with pytest.raises(WorkspaceRefused, match="does not take URL attachments"):
        policy.attachment_source("https://example.org/cat.png")
    assert policy.attachment_source("https://example.org/c.png", allow_urls=True) == (
        "https://example.org/c.png"
    )
    for scheme in ("ftp", "gopher", "data", "base64"):
        with pytest.raises(WorkspaceRefused, match=f"uses the {scheme}:// scheme"):
            policy.attachment_source(f"{scheme}://x", allow_urls=True)
    assert policy.attachment_source("base64://AAAA", data_schemes=("base64",)) == "base64://AAAA"
    assert policy.attachment_source("sub/report.txt") == (root / "sub/report.txt").resolve()
    with pytest.raises(WorkspaceRefused, match="outside the workspace"):
        policy.attachment_source("file:///etc/passwd", allow_urls=True)


# -- size ---------------------------------------------------------------------------------------


def test_an_attachment_over_the_cap_is_refused_by_stat(root: Path) -> None:
    big = root / "big.iso"
    with big.open("wb") as handle:
        handle.truncate(300 * 1024 * 1024)  # sparse: no disk, no memory
    policy = WorkspacePolicy((root,))
    with pytest.raises(WorkspaceRefused) as caught:
        policy.read_attachment("big.iso")
    assert str(caught.value) == (
        "attachment refused: big.iso is 300.0 MB, over the 25.0 MB limit for attachments; send a "
        "smaller file"
    )
    small = WorkspacePolicy((root,), max_attachment_bytes=6)
    assert small.read_attachment("sub/report.txt") == (
        (root / "sub/report.txt").resolve(),
        b"report",
    )
    smaller = WorkspacePolicy((root,), max_attachment_bytes=5)
    with pytest.raises(WorkspaceRefused, match=r"over the 0\.0 MB limit"):
        smaller.attachment("sub/report.txt")


RSS_PROBE = textwrap.dedent(
    """
    import json, re, sys

    def peak_kb():  # VmHWM: this process's own peak (ru_maxrss keeps the parent's across exec)
        with open("/proc/self/status") as status:
            return int(re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1))

    from kernos.runtime import WorkspacePolicy, WorkspaceRefused

    root, name, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
    policy = WorkspacePolicy((root,), max_attachment_bytes=cap)
    before = peak_kb()
    try:
        _, data = policy.read_attachment(name)
        outcome = f"read {len(data)}"
    except WorkspaceRefused as exc:
        outcome = str(exc)
    after = peak_kb()
    print(json.dumps({"grew_kb": after - before, "outcome": outcome}))
    """
)


def rss_probe(root: Path, name: str, cap: int) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, str(root), name, str(cap)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_an_over_cap_file_is_never_read_peak_rss_stays_flat(root: Path) -> None:
    """A fresh process per measurement, so the peak is this call's own."""
    with (root / "big.iso").open("wb") as handle:
        handle.truncate(300 * 1024 * 1024)
    with (root / "mid.iso").open("wb") as handle:
        handle.truncate(160 * 1024 * 1024)
    refused = rss_probe(root, "big.iso", 25 * 1024 * 1024)
    assert str(refused["outcome"]).startswith("attachment refused: big.iso is 300.0 MB")
    assert int(str(refused["grew_kb"])) < 8 * 1024
    # the probe can see a read: a 160 MB file under a 200 MB cap raises the peak (by less than
    # 160 MB: the peak before the call already held some transient import memory)
    read = rss_probe(root, "mid.iso", 200 * 1024 * 1024)
    assert read["outcome"] == f"read {160 * 1024 * 1024}"
    assert int(str(read["grew_kb"])) >= 96 * 1024


def test_a_file_that_grows_past_the_cap_after_the_check_is_not_read_past_it(root: Path) -> None:
    policy = WorkspacePolicy((root,), max_attachment_bytes=6)
    assert policy.read_attachment("sub/report.txt")[1] == b"report"
    (root / "sub" / "report.txt").write_text("report!")
    with pytest.raises(WorkspaceRefused, match=r"over the 0\.0 MB limit"):
        policy.read_attachment("sub/report.txt")


# -- configuration ------------------------------------------------------------------------------


def test_workspace_config_roots_are_read_against_the_config_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KERNOS_HOME")
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    (project / "docs" / "a.md").write_text("a")
    (project / "kernos.toml").write_text(
        '[workspace]\nroots = ["docs", "/tmp"]\nallow_hidden = true\nmax_attachment_bytes = 10\n'
    )
    policy = WorkspacePolicy.from_config(load_config(project / "kernos.toml", cwd=tmp_path))
    assert policy.roots == ((project / "docs").resolve(), Path("/tmp").resolve())
    assert policy.allow_hidden and policy.max_attachment_bytes == 10
    assert policy.resolve("a.md") == (project / "docs" / "a.md").resolve()
    assert (tmp_path / ".kernos").resolve() in policy.denied
    assert (project / "kernos.toml").resolve() in policy.denied


def test_the_default_workspace_is_the_working_directory_minus_state_and_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KERNOS_HOME")
    config = load_config(cwd=tmp_path)
    assert config.workspace.roots == ["."]
    assert config.workspace.max_attachment_bytes == 26214400
    assert not config.workspace.allow_hidden
    policy = WorkspacePolicy.from_config(config)
    assert policy.roots == (tmp_path.resolve(),)
    assert set(policy.denied) == {(tmp_path / ".kernos").resolve(), tmp_path / "kernos.toml"}
    assert WorkspacePolicy.default(tmp_path) == policy


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ('[workspace]\nroots = ["missing"]\n', "entry 1 ('missing') is not an existing directory"),
        ("[workspace]\nmax_attachment_bytes = -1\n", "workspace.max_attachment_bytes"),
        ("[workspace]\nroots = []\n", "workspace.roots"),
        ("[workspace]\nallow_hiden = true\n", "workspace.allow_hiden: unknown key"),
    ],
)
def test_bad_workspace_tables_are_config_errors(tmp_path: Path, body: str, fragment: str) -> None:
    (tmp_path / "kernos.toml").write_text(body)
    with pytest.raises(ConfigError) as caught:
        WorkspacePolicy.from_config(load_config(cwd=tmp_path))
    assert fragment in str(caught.value)


# -- the property -------------------------------------------------------------------------------

NAMES = [
    "a.txt", "sub", "b.txt", ".hidden", "c.txt", ".env", "dir", "kernos.toml", "state", "db",
    "pipe", "link_in", "link_out", "link_dir_out", "link_hidden", "link_state", "link_sub",
    "broken", "loop", "..", ".", "outside", "secret.txt", "ws", "other", "o.txt", "nope", "",
]  # fmt: skip


@pytest.fixture(scope="module")
def tree() -> Iterator[Path]:
    """``base/ws`` and ``base/other`` are the roots; symlinks made by the test lead everywhere."""
    with tempfile.TemporaryDirectory() as raw:
        base = Path(raw).resolve()
        ws, other, outside = base / "ws", base / "other", base / "outside"
        for folder in (ws / "sub", ws / ".hidden", ws / "dir", ws / "state", other, outside):
            folder.mkdir(parents=True)
        for file in ("a.txt", "sub/b.txt", ".hidden/c.txt", ".env", "kernos.toml", "state/db"):
            (ws / file).write_text(file)
        (other / "o.txt").write_text("o")
        (outside / "secret.txt").write_text("secret")
        os.mkfifo(ws / "pipe")
        links = {
            "link_in": "a.txt",
            "link_out": "../outside/secret.txt",
            "link_dir_out": "../outside",
            "link_hidden": ".hidden/c.txt",
            "link_state": "state/db",
            "link_sub": "sub",
            "broken": "nope",
            "loop": "loop",
        }
        for name, target in links.items():
            (ws / name).symlink_to(target)
        (other / "link_back").symlink_to(ws / "sub" / "b.txt")
        yield base


def admissible(base: Path, allow_hidden: bool) -> set[str]:
    """Written out by hand: the regular files a model may reach in :func:`tree`."""
    files = {base / "ws/a.txt", base / "ws/sub/b.txt", base / "other/o.txt"}
    if allow_hidden:
        files |= {base / "ws/.hidden/c.txt", base / "ws/.env"}
    return {str(f) for f in files}


def expected_real(base: Path, text: str) -> str | None:
    """Where the text leads, computed apart from the policy: ``os.path.realpath`` of the path (a
    ``file://`` URI's path) read against the first root; ``None`` for text that names no path."""
    where = text.strip()
    if where.startswith("file://"):
        parts = urlsplit(where)
        if parts.netloc not in ("", "localhost"):
            return None
        where = unquote(parts.path)
    if not where or "\x00" in where or "://" in where:
        return None
    real = os.path.realpath(os.path.join(base / "ws", where))
    # realpath gives up at a symlink loop and leaves the rest as written, symlinks and all: no
    # real path then
    return None if any(os.path.islink(p) for p in [real, *map(str, Path(real).parents)]) else real


#: Paths that lead somewhere interesting; random components are appended to some of them.
LEADS = [
    "a.txt", "sub/b.txt", "link_in", "link_sub/b.txt", "sub/../a.txt", "../other/o.txt",
    "../other/link_back", "../ws/a.txt", "./sub/./b.txt", "link_dir_out/secret.txt", "link_out",
    "../outside/secret.txt", "link_hidden", ".hidden/c.txt", ".env", "state/db", "link_state",
    "kernos.toml", "pipe", "dir", "broken", "loop", "sub/b.txt/", "dir/../.env",
]  # fmt: skip


@st.composite
def model_paths(draw: st.DrawFn, base: Path) -> str:
    lead = draw(st.one_of(st.just([]), st.sampled_from(LEADS).map(lambda p: [p])))
    parts = draw(st.lists(st.sampled_from(NAMES), min_size=0, max_size=4 if not lead else 1))
    relative = "/".join([*lead, *parts])
    prefix = draw(st.sampled_from(["", "", "/", f"{base}/", f"{base}/ws/", f"{base}/other/", "./"]))
    path = prefix + relative
    form = draw(st.sampled_from(["plain", "file", "file-localhost", "file-host", "padded"]))
    if form == "plain":
        return path
    if form == "padded":
        return f"  {path}\n"
    absolute = path if path.startswith("/") else f"{base}/ws/{path}"
    host = {"file": "", "file-localhost": "localhost", "file-host": "evil"}[form]
    return f"file://{host}{quote(absolute)}"


@pytest.mark.parametrize("allow_hidden", [False, True])
@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_the_policy_admits_exactly_the_regular_files_inside_a_root_that_are_not_denied(
    tree: Path, allow_hidden: bool, data: st.DataObject
) -> None:
    base = tree
    policy = WorkspacePolicy(
        (base / "ws", base / "other"),
        (base / "ws/state", base / "ws/kernos.toml"),
        allow_hidden=allow_hidden,
    )
    text = data.draw(model_paths(base))
    real = expected_real(base, text)
    admitted = real in admissible(base, allow_hidden)
    event("admitted" if admitted else "refused")
    try:
        got = policy.resolve(text)
    except WorkspaceRefused as exc:
        assert not admitted, f"{text!r} refused: {exc}"
        assert str(exc).startswith("path refused: ")
    else:
        assert admitted, f"{text!r} admitted as {got}"
        assert str(got) == real


@pytest.mark.parametrize("text", ["loop/../link_out", "loop/../link_in"])
def test_a_path_through_a_symlink_loop_is_refused(tree: Path, text: str) -> None:
    # realpath stops at the loop and hands back the rest unresolved: ws/link_out, a symlink
    # leading outside, would pass as a file inside the root
    policy = WorkspacePolicy((tree / "ws",), (), allow_hidden=True)
    with pytest.raises(WorkspaceRefused, match="leads through a symlink loop"):
        policy.resolve(text)


def test_one_table_words_a_refusal_for_a_path_sent_and_a_path_read() -> None:
    from kernos.runtime import path_refusal

    assert path_refusal("denied", "/w") == (
        "is kernos's own state or configuration, which is never sent; send another file"
    )
    assert path_refusal("denied", "/w", read=True) == (
        "is kernos' own state or configuration, which tools may not read"
    )
    assert path_refusal("outside", "/w", read=True) == "is outside the workspace (roots: /w)"
    assert path_refusal("hidden", "/w", read=True) == (
        "is hidden (a path component starts with '.'), and hidden paths are not shown"
    )
