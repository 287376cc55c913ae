"""``muster sandbox image`` and the image's tag: a changed recipe is a new tag, a missing tool is named with its
package, and a built image is kept (CI builds it for real before the tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster_api.commands.cli import main
from muster_dispatch import DispatchError, container_image
from muster_dispatch.container_image import build_image, image_tag


def test_a_changed_recipe_is_a_new_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    before = image_tag()
    assert before.startswith("localhost/muster-sandbox:")
    monkeypatch.setattr(container_image, "PACKAGES", (*container_image.PACKAGES, "ripgrep"))
    assert image_tag() != before
    monkeypatch.setattr(container_image, "PACKAGES", tuple(reversed(container_image.PACKAGES[:-1])))
    assert image_tag() == before  # the order of the packages is not part of what goes in


def test_a_missing_mmdebstrap_names_its_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DispatchError) as caught:
        build_image("podman")
    assert caught.value.code == "configuration"
    assert "apt-get install mmdebstrap" in caught.value.message and "\n" not in caught.value.message


@pytest.mark.container
def test_the_command_keeps_a_built_image(podman_image: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sandbox", "image"]) == 0
    assert capsys.readouterr().out.strip() == f"{podman_image} is already built"
