"""A sandbox process that reads a file at a fixed path under ``/etc``, given the sandbox's
own: it runs in a private mount namespace (``unshare``, its user mapped to root there, so no
privilege is needed) in which an overlay on ``/etc`` shows a directory of the sandbox at that
path. The host's ``/etc`` is never written; the overlay's layers live in the sandbox's
directory.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from extender.sandbox.local import SandboxError

#: The overlay goes on /etc, then the command replaces the shell (same PID, so the sandbox's
#: process table stops the command itself).
_SCRIPT = ('mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc '
           '&& shift 2 && exec "$@"')


def layers(directory: Path, name: str) -> tuple[Path, Path]:
    """``(upper, work)``: the overlay's directories for process ``name`` in ``directory``."""
    base = (directory / f"{name}-etc").resolve()
    return base / "upper", base / "work"


def prepare(directory: Path, name: str, *, at: str, target: Path) -> None:
    """Make the overlay's layers so that ``/etc/<at>`` shows ``target`` in the namespace."""
    upper, work = layers(directory, name)
    link = upper / at
    link.parent.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(target.resolve(), target_is_directory=True)


def wrapped(argv: Sequence[str], directory: Path, name: str) -> list[str]:
    """``argv`` run in a mount namespace of its own with the overlay of :func:`prepare`."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SandboxError(f"{name} needs unshare (util-linux) to see the sandbox's "
                           f"certificates under /etc; install it or leave it out (--no-{name})")
    upper, work = layers(directory, name)
    if any(c in str(upper) for c in ",:\\"):
        raise SandboxError(f"{name}: the sandbox directory {directory} holds a character "
                           "(',', ':' or '\\') an overlay mount cannot take")
    return [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", _SCRIPT, "sh",
            str(upper), str(work), *argv]
