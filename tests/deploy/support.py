"""Readers for the files in deploy/: YAML documents, the Dockerfile's stages, .dockerignore's patterns."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPOSE = DEPLOY / "compose.yaml"
AZURITE_DOCKERFILE = DEPLOY / "azurite.Dockerfile"
PACKAGE_JSON = REPO / "package.json"
PACKAGE_LOCK = REPO / "package-lock.json"
DEPLOY_README = DEPLOY / "README.md"

#: The port the deployment files give the worker's HTTP endpoints (WORKER__worker__httpPort).
HTTP_PORT = 8080


def documented_stop_timeout() -> int:
    """The ``--stop-timeout`` deploy/README.md gives ``podman run`` and ``docker run``: seconds from ``stop``'s
    SIGTERM to its SIGKILL (their default, 10 s, is shorter than the worker's drain)."""
    found = {int(m) for m in re.findall(r"--stop-timeout[ =](\d+)", DEPLOY_README.read_text(encoding="utf-8"))}
    assert len(found) == 1, f"deploy/README.md gives --stop-timeout {sorted(found) or 'nowhere'}: one value expected"
    return found.pop()


def locked_azurite() -> str:
    """The Azurite version package-lock.json installs (``npm ci``): the test suite's, and the compose file's."""
    lock = json.loads(PACKAGE_LOCK.read_text(encoding="utf-8"))
    return str(lock["packages"]["node_modules/azurite"]["version"])


def compose_default(value: str) -> str:
    """A compose value with its ``${NAME:-default}`` variables replaced by their defaults, as Docker Compose and
    podman-compose read it when the variable is not set."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty document of a YAML file."""
    with path.open(encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


# ---------------------------------------------------------------------------------------------- Dockerfile


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    value: str

    def exec_form(self) -> list[str] | None:
        """The JSON-array (exec) form's arguments, or None for the shell form."""
        return exec_form(self.value)


@dataclass
class Stage:
    image: str  # the FROM image, with build arguments substituted
    name: str | None
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


@dataclass
class Dockerfile:
    args: dict[str, str]  # ARGs declared before the first FROM, with their defaults
    stages: list[Stage]
    comments: list[tuple[int, str]]  # (line, text) of every comment line


def exec_form(value: str) -> list[str] | None:
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    if isinstance(parsed, list) and parsed and all(isinstance(item, str) for item in parsed):
        return parsed
    return None


def substitute(text: str, args: dict[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` replaced by the build argument's default (unknown names are left)."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)


def parse_dockerfile(text: str) -> Dockerfile:
    """Instructions with their continuation lines joined; comment lines, even inside a continuation, dropped."""
    instructions: list[Instruction] = []
    comments: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#"):
            comments.append((number, stripped))
            continue
        if not stripped and not pending:
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        joined = " ".join(part for part in pending if part)
        pending = []
        keyword, _, value = joined.partition(" ")
        instructions.append(Instruction(start, keyword.upper(), value.strip()))
    assert not pending, "the Dockerfile ends inside a continuation line"

    args: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            words = [w for w in instruction.value.split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(substitute(words[0], args), name, instruction.line))
        elif not stages:
            if instruction.keyword == "ARG":
                key, _, default = instruction.value.partition("=")
                args[key.strip()] = default.strip().strip('"')
        else:
            stages[-1].instructions.append(instruction)
    return Dockerfile(args, stages, comments)


def copy_sources(instruction: Instruction) -> list[str]:
    """The source paths of a COPY (not the destination; options such as --chown dropped)."""
    words = exec_form(instruction.value) or instruction.value.split()
    words = [w for w in words if not w.startswith("--")]
    return words[:-1]


# --------------------------------------------------------------------------------------------- .dockerignore


def _translate(pattern: str) -> str:
    """A .dockerignore pattern (Go's filepath.Match plus ``**``) as a regular expression."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


def dockerignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(negated, regex) for each pattern, in order."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip().removeprefix("./").strip("/")
        rules.append((negated, re.compile(_translate(pattern))))
    return rules


def is_ignored(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker leaves ``path`` (relative to the context) out: a pattern matching the path or one of its
    parent folders excludes it, and the last matching pattern wins (``!`` patterns include again)."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for negated, regex in rules:
        if any(regex.fullmatch(candidate) for candidate in candidates):
            ignored = not negated
    return ignored


# ------------------------------------------------------------------------------------------------ quantities

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def memory_bytes(quantity: str | int) -> int:
    """A Kubernetes memory quantity (``2Gi``, ``512Mi``, ``1G``, plain bytes) in bytes."""
    text = str(quantity)
    for suffix, factor in (*_BINARY.items(), *_DECIMAL.items()):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)


def cpu_millis(quantity: str | int | float) -> int:
    """A Kubernetes CPU quantity (``1``, ``0.5``, ``500m``) in millicores."""
    text = str(quantity)
    if text.endswith("m"):
        return int(text[:-1])
    return int(float(text) * 1000)


def jvm_memory_bytes(value: str) -> int:
    """A JVM/Spark size (``1g``, ``512m``, ``1024k``) in bytes (binary units, as the JVM reads them)."""
    match = re.fullmatch(r"(\d+)([kmgt]?)b?", value.strip().lower())
    assert match, f"not a JVM memory size: {value!r}"
    return int(match.group(1)) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[match.group(2)]
