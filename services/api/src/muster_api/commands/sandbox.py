"""``muster sandbox image``: build the container image the podman and docker sandboxes run, from Debian packages.

Idempotent: an image already tagged with the recipe's hash is kept (``--rebuild`` builds it again)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

ENGINES = ("podman", "docker")


def register(sub: Any) -> None:
    sandbox = sub.add_parser("sandbox", help="the container sandboxes (podman, docker)")
    commands = sandbox.add_subparsers(dest="sandbox_command", required=True)
    image = commands.add_parser("image", help="build the sandbox image from Debian packages (mmdebstrap) and tag it")
    image.add_argument("--engine", choices=ENGINES, default="podman", help="whose image store (default podman)")
    image.add_argument("--rebuild", action="store_true", help="build even when the tagged image exists")
    image.set_defaults(fn=_image)


def _image(args: argparse.Namespace) -> int:
    import shutil

    from muster_dispatch import DispatchError
    from muster_dispatch.container_image import build_image, image_exists, image_tag

    tag = image_tag()
    cli = shutil.which(args.engine)
    if cli is not None and not args.rebuild and image_exists(cli, tag):
        print(f"{tag} is already built")
        return 0
    print(f"building {tag} with mmdebstrap and {args.engine} import…", flush=True)
    started = time.monotonic()
    try:
        build_image(args.engine)
    except DispatchError as exc:
        print(f"muster: {exc.message}", file=sys.stderr)
        return 1
    print(f"{tag} built in {time.monotonic() - started:.0f} s")
    return 0
