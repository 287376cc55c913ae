"""The container image the Podman and Docker sandboxes run: a minimal Debian with Node, git, procps and Python.

Built here from Debian packages (``mmdebstrap`` into a tarball, then ``podman import`` / ``docker import``), since no
image can be pulled on a machine without a registry. The pinned CLIs are not inside: their install directory is
mounted read-only into each container, as bubblewrap binds it, so a new pin needs no new image (copying the ~1.4 GB of
CLIs into a layer would make every build minutes long). The tag carries a hash of the recipe (suite, variant,
packages): a changed recipe is a new image, and a provider finds a missing one before any run starts.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from typing import Literal

from muster_dispatch.errors import DispatchError

Engine = Literal["podman", "docker"]
SUITE = "bookworm"
VARIANT = "minbase"
# Node runs the CLIs' launchers; git and procps are what their tools call; Python runs the egress bridge.
PACKAGES = ("nodejs", "ca-certificates", "git", "procps", "python3")
REPOSITORY = "localhost/muster-sandbox"
BUILD_COMMAND = "muster sandbox image"


def image_tag() -> str:
    """The image's name with the hash of what goes into it."""
    recipe = json.dumps({"suite": SUITE, "variant": VARIANT, "packages": sorted(PACKAGES)}, sort_keys=True)
    return f"{REPOSITORY}:{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def missing_image(engine: Engine, image: str) -> DispatchError:
    return DispatchError(
        "configuration",
        f"sandbox {engine} cannot start: image {image} is missing; build it with `{BUILD_COMMAND}"
        f"{' --engine docker' if engine == 'docker' else ''}`",
        {"field": "sandbox", "image": image},
    )


def image_exists(executable: str, image: str, env: dict[str, str] | None = None) -> bool:
    """``image inspect`` answers for podman and docker alike (``podman image exists`` has no docker twin)."""
    done = subprocess.run([executable, "image", "inspect", image], capture_output=True, env=env, check=False)
    return done.returncode == 0


def build_image(engine: Engine = "podman", *, executable: str | None = None, env: dict[str, str] | None = None) -> str:
    """Build and tag the image for ``engine`` (its CLI: ``executable``); returns the tag. Raises ``configuration``
    naming the package when a tool is missing, ``provider`` when the build fails."""
    tag = image_tag()
    mmdebstrap = _tool("mmdebstrap", "mmdebstrap")
    cli = _tool(executable or engine, "podman" if engine == "podman" else "docker.io")
    debootstrap = [mmdebstrap, "--quiet", f"--variant={VARIANT}", f"--include={','.join(PACKAGES)}", SUITE, "-"]
    importer = [cli, "import", "--change", 'CMD ["/bin/sh"]', "-", tag]
    # mmdebstrap's messages go to a file: a full stderr pipe would stop it while import waits for the tarball.
    with tempfile.TemporaryFile() as log, subprocess.Popen(debootstrap, stdout=subprocess.PIPE, stderr=log) as tarball:
        done = subprocess.run(importer, stdin=tarball.stdout, capture_output=True, env=env, check=False)
        assert tarball.stdout is not None
        tarball.stdout.close()
        tarball.wait()
        log.seek(0)
        errors = log.read()
    if tarball.returncode != 0:
        raise DispatchError("provider", f"mmdebstrap failed: {_last_line(errors)}")
    if done.returncode != 0:
        raise DispatchError("provider", f"{engine} import failed: {_last_line(done.stderr)}")
    return tag


def _tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise DispatchError(
            "configuration", f"{name} not found; install it (apt-get install {package})", {"field": "sandbox"}
        )
    return found


def _last_line(output: bytes) -> str:
    lines = output.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"


__all__ = ["BUILD_COMMAND", "PACKAGES", "build_image", "image_exists", "image_tag", "missing_image"]
