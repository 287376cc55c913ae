"""Bootstrap: unknown names, the executable override, and an npm install into the cache (with a fake npm on PATH)."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster_dispatch import DispatchError, claude_harness, codex_harness, ensure_cli
from muster_dispatch.harnesses import claude, codex
from tests.dispatch.unit.support import make_cli


def test_unknown_name_fails_with_configuration() -> None:
    with pytest.raises(DispatchError) as info:
        ensure_cli("aider")
    assert info.value.code == "configuration" and "claude" in info.value.message and "gemini" in info.value.message


def test_executable_override_is_returned_as_is(tmp_path: Path) -> None:
    exe = make_cli(tmp_path, "print('x')")
    assert ensure_cli(claude_harness(executable=exe)) == exe
    with pytest.raises(DispatchError) as info:
        ensure_cli(claude_harness(executable=tmp_path / "missing"))
    assert info.value.code == "configuration"


def test_pins() -> None:
    assert claude_harness().bootstrap == claude.claude_harness().bootstrap
    spec = codex_harness().bootstrap
    assert spec is not None and (spec.package, spec.version, spec.binary) == ("@openai/codex", "0.169.0", "codex")
    assert claude.VERSION == "2.1.328" and codex.VERSION == "0.169.0"


# A fake npm: `npm install --prefix P ... PKG@VERSION` writes P/node_modules/.bin/<bin> printing VERSION.
FAKE_NPM = r"""
args = sys.argv[1:]
prefix = args[args.index("--prefix") + 1]
package = args[-1]
name, version = package.rsplit("@", 1)
binary = "claude" if "claude" in name else "codex"
folder = os.path.join(prefix, "node_modules", ".bin")
os.makedirs(folder, exist_ok=True)
path = os.path.join(folder, binary)
printed = os.environ.get("FAKE_NPM_VERSION", version)
with open(path, "w") as f:
    f.write("#!/bin/sh\necho '%s (fake)'\n" % printed)
os.chmod(path, 0o755)
with open(os.path.join(prefix, "installs.log"), "a") as f:
    f.write(package + "\n")
"""


def test_install_into_the_cache_once_and_verify_the_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make_cli(bin_dir, FAKE_NPM, name="npm")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("MUSTER_CLI_CACHE", str(tmp_path / "cache"))
    path = ensure_cli("claude")
    assert path == tmp_path / "cache" / "claude-2.1.328" / "node_modules" / ".bin" / "claude"
    assert ensure_cli(claude_harness()) == path  # already installed: no second install
    log = (tmp_path / "cache" / "claude-2.1.328" / "installs.log").read_text().splitlines()
    assert log == ["@anthropic-ai/claude-code@2.1.328"]
    other = ensure_cli(codex_harness(), cache_dir=tmp_path / "elsewhere")
    assert other == tmp_path / "elsewhere" / "codex-0.169.0" / "node_modules" / ".bin" / "codex"


def test_wrong_version_after_install_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make_cli(bin_dir, FAKE_NPM, name="npm")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_NPM_VERSION", "9.9.9")
    with pytest.raises(DispatchError) as info:
        ensure_cli("codex", cache_dir=tmp_path / "cache")
    assert info.value.code == "provider" and "0.169.0" in info.value.message


def test_missing_npm_fails_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DispatchError) as info:
        ensure_cli("codex", cache_dir=tmp_path / "cache")
    assert info.value.code == "provider" and "npm" in info.value.message
