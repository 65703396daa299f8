"""podman for the container tests: the tools, their settings, the base image made offline, the images built from
deploy/Dockerfile and deploy/azurite.Dockerfile as shipped, and the containers run from them.

Why each part is as it is:

- podman reads ``containers.conf`` beside this file (``CONTAINERS_CONF``), never the machine's own, which is left as
  its operator wrote it: a root without CAP_SYS_RESOURCE cannot raise the open-files limit to podman's default, and
  crun 1.8 refuses hybrid cgroup hierarchies where runc runs them.
- No image registry need be reachable. The base image the Dockerfile's ``PYTHON_IMAGE`` names (python:3.11-slim on
  Debian) is stood in for by one made here with mmdebstrap: Debian's minimal system of this machine's release with
  its python3, from the Debian repositories apt is configured with (read from apt at run time), and this machine's
  own certificate authorities, so that pip inside the build reaches the package index through whatever this machine
  trusts. Its tag holds a digest of everything it is made from, so it is made once per recipe and kept.
- Images are built with ``--pull=never`` (nothing is fetched from a registry) and podman's layer cache, and run by
  the id the build wrote, never by a tag another build may have moved.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "Dockerfile"
AZURITE_DOCKERFILE = REPO / "deploy" / "azurite.Dockerfile"
CONTAINERS_CONF = Path(__file__).with_name("containers.conf")
#: Executable -> the Debian package that brings it (podman-compose runs deploy/compose.yaml).
TOOLS = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap", "podman-compose": "podman-compose"}
INSTALL = f"apt-get update && apt-get install -y {' '.join(TOOLS.values())}"
#: Debian packages of the base image: what python:3.11-slim gives the Dockerfile (python3 with venv, and the
#: certificate store pip uses).
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
#: Where a machine keeps certificate authorities of its own (update-ca-certificates adds them to the bundle).
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
#: Longest a build may take: from an empty store it downloads PySpark (some 450 MB) and a JRE.
BUILD_TIMEOUT = 1200.0


def missing_tools() -> list[str]:
    """The executables of TOOLS not on PATH."""
    return [name for name in TOOLS if shutil.which(name) is None]


class PodmanError(AssertionError):
    """A podman command failed: the command, its exit code and what it wrote."""


@dataclass
class Podman:
    """Runs podman with the tests' containers.conf."""

    env: dict[str, str]

    def run(
        self, *args: str, timeout: float = 120.0, check: bool = True, input: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``podman ARGS``; with ``check`` a non-zero exit raises PodmanError with its output."""
        result = subprocess.run(
            ["podman", *args], env=self.env, cwd=REPO, capture_output=True, timeout=timeout, input=input, check=False
        )
        done = subprocess.CompletedProcess(
            result.args, result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")
        )
        if check and done.returncode != 0:
            raise PodmanError(
                f"podman {' '.join(args)} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            )
        return done

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """``podman ARGS`` in the background (``podman stop``, which returns once the container has exited)."""
        return subprocess.Popen(
            ["podman", *args], env=self.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )


def podman(environ: dict[str, str]) -> Podman:
    """A Podman on this machine, or a test failure naming every tool missing and the command that installs them."""
    missing = missing_tools()
    if missing:
        pytest.fail(
            f"the container tests need {', '.join(missing)}: run as root `{INSTALL}` (make test does)", pytrace=False
        )
    return Podman({**environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)})


# ------------------------------------------------------------------------------------------------- base image


def release() -> str:
    """This machine's Debian release (bookworm): the base image's, so that apt's repositories serve it."""
    for line in Path("/etc/os-release").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME":
            return value.strip('"')
    raise AssertionError("/etc/os-release names no VERSION_CODENAME: not a Debian release mmdebstrap can make")


def apt_sources(codename: str) -> list[str]:
    """``deb URI SUITE COMPONENT`` for each Debian repository of ``codename`` apt is configured with (the release, its
    updates and security suites), as apt itself reports them."""
    listed = subprocess.run(
        [
            "apt-get",
            "indextargets",
            "--format",
            "$(REPO_URI) $(RELEASE) $(COMPONENT)",
            "Identifier: Packages",
            "Origin: Debian",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    lines = sorted(
        {
            f"deb {line}"
            for line in listed.splitlines()
            if line.split()[1] == codename or line.split()[1].startswith(f"{codename}-")
        }
    )
    assert lines, f"apt is configured with no Debian repository of {codename} (apt-get indextargets)"
    return lines


def local_cas() -> list[Path]:
    return sorted(LOCAL_CAS.glob("**/*.crt")) if LOCAL_CAS.is_dir() else []


def base_image(podman: Podman) -> str:
    """The base image's name, made with mmdebstrap and imported into podman unless an image of this recipe exists."""
    codename = release()
    sources = apt_sources(codename)
    cas = local_cas()
    recipe = hashlib.sha256(
        json.dumps([codename, sources, BASE_PACKAGES, [(p.name, p.read_bytes().hex()) for p in cas]]).encode()
    ).hexdigest()
    name = f"localhost/queueworker-base:{codename}-{recipe[:12]}"
    if podman.run("image", "exists", name, check=False).returncode == 0:
        return name
    hooks = [f'mkdir -p "$1{LOCAL_CAS}"', *(f'cp {p} "$1{LOCAL_CAS}/"' for p in cas), 'chroot "$1" update-ca-certificates']
    made = subprocess.run(
        [
            "mmdebstrap",
            "--quiet",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            *(f"--customize-hook={hook}" for hook in hooks),
            codename,
            "-",
            *sources,
        ],
        capture_output=True,
        timeout=900,
        check=False,
    )
    assert made.returncode == 0, f"mmdebstrap exited {made.returncode}:\n{made.stderr.decode(errors='replace')}"
    podman.run("import", "--change", 'CMD ["python3"]', "-", name, input=made.stdout, timeout=300)
    return name


# ------------------------------------------------------------------------------------------------------ images


@dataclass(frozen=True)
class Image:
    """An image built from deploy/Dockerfile: its id and its size as podman reports it."""

    id: str
    size: int


def build(podman: Podman, base: str, tag: str, work: Path, *build_args: str, dockerfile: Path = DOCKERFILE) -> Image:
    """``dockerfile`` (deploy/Dockerfile unless given) as shipped, built from the repository with only the base image
    replaced; tagged ``tag`` for whoever looks at the store, while the tests use the id."""
    iidfile = work / f"iid-{uuid.uuid4().hex[:8]}"
    args = [f"--build-arg=PYTHON_IMAGE={base}", *(f"--build-arg={arg}" for arg in build_args)]
    podman.run(
        "build",
        "--pull=never",
        "--layers",
        "-f",
        str(dockerfile),
        *args,
        "--iidfile",
        str(iidfile),
        "-t",
        tag,
        str(REPO),
        timeout=BUILD_TIMEOUT,
    )
    image_id = iidfile.read_text(encoding="utf-8").strip().removeprefix("sha256:")
    size = int(podman.run("image", "inspect", "--format", "{{.Size}}", image_id).stdout.strip())
    return Image(image_id, size)


# -------------------------------------------------------------------------------------------------- containers


@dataclass
class Container:
    """A container started detached from an image; removed with :meth:`remove`."""

    podman: Podman
    name: str = field(default_factory=lambda: f"queueworker-test-{uuid.uuid4().hex[:8]}")

    def start(self, image: Image, *options: str, args: tuple[str, ...] = ()) -> Container:
        self.podman.run("run", "--detach", "--name", self.name, *options, image.id, *args)
        return self

    def exec(self, *command: str, timeout: float = 120.0) -> str:
        """What ``command`` writes on stdout, run in the container as its user; a non-zero exit fails."""
        return self.podman.run("exec", self.name, *command, timeout=timeout).stdout

    def state(self) -> dict[str, object]:
        return json.loads(self.podman.run("inspect", "--format", "{{json .State}}", self.name).stdout)

    def logs(self) -> str:
        found = self.podman.run("logs", self.name, check=False)
        return (found.stdout + found.stderr)[-8000:]

    def remove(self) -> None:
        """The container and its anonymous volumes (the image's ``VOLUME /data``), which would outlive it otherwise."""
        self.podman.run("rm", "--force", "--volumes", "--time", "0", self.name, check=False)
