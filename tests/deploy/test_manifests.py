"""deploy/k8s and deploy/compose.yaml: valid objects, wired the way the worker needs.

The built-in Kubernetes objects are validated against Kubernetes' own JSON schemas (kubernetes-validate
bundles them, so this works offline). KEDA's ScaledObject and TriggerAuthentication are custom resources:
they are validated against the openAPIV3Schema of KEDA's own CustomResourceDefinitions, copied unchanged
into tests/deploy/data/keda (its README names the release), with jsonschema. Both validations are strict:
an unknown field fails, as it does when kubectl applies the files. Whatever a schema cannot know is checked
in any case: probes, the grace period against host.yaml's drainTimeout, the Secret the Deployment and KEDA
read, the user, the volumes the worker writes to.
"""

from __future__ import annotations

import functools
import json
import posixpath
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import jsonschema
import pytest
import yaml

from tests.deploy.support import (
    AZURITE_DOCKERFILE,
    COMPOSE,
    HTTP_PORT,
    K8S,
    PACKAGE_JSON,
    REPO,
    compose_default,
    cpu_millis,
    documented_stop_timeout,
    jvm_memory_bytes,
    locked_azurite,
    memory_bytes,
    yaml_documents,
)
from worker.backends.azure.connection import DEV_ACCOUNT, DEV_ACCOUNT_KEY, parse_connection_string
from worker.middleware.spark_settings import from_config
from worker.settings.config import HostConfig, load_config, parse_duration

#: Kubernetes versions the manifests must be valid for: an old supported one and the newest bundled.
KUBERNETES_VERSIONS = ["1.29", "1.37"]
KEDA_API = "keda.sh/v1alpha1"
KEDA_KINDS = {"ScaledObject", "TriggerAuthentication"}
#: KEDA's CustomResourceDefinitions of those kinds, as its release ships them (see the README there).
KEDA_CRDS = Path(__file__).with_name("data") / "keda"
#: Seconds the grace period must leave after drainTimeout: releasing the rest, stopping Spark's JVM.
SHUTDOWN_MARGIN = 10.0


# ------------------------------------------------------------------------------------------------- helpers


@functools.cache
def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


@functools.cache
def k8s_objects() -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) for every object in deploy/k8s, read once: tests must not change them."""
    return [(path.name, doc) for path in manifest_files() for doc in yaml_documents(path)]


def find(kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [obj for _, obj in k8s_objects() if obj.get("kind") == kind and (name is None or obj["metadata"]["name"] == name)]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(kind, name)
    assert len(found) == 1, f"expected one {kind}{f' named {name}' if name else ''} in deploy/k8s, found {len(found)}"
    return found[0]


def deployment() -> dict[str, Any]:
    return one("Deployment")


def pod_spec() -> dict[str, Any]:
    return deployment()["spec"]["template"]["spec"]


def worker_container() -> dict[str, Any]:
    containers = pod_spec()["containers"]
    assert len(containers) == 1, "the worker's pod has one container"
    return containers[0]


def option(args: list[str], name: str) -> str:
    assert name in args, f"{name} missing from the container's args {args}"
    return args[args.index(name) + 1]


def literal_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def app_functions() -> list[Any]:
    """The sample app's functions, as the worker loads them."""
    from functions.function_app import app

    return app.functions


def trigger_queues() -> set[str]:
    return {f.queue_name for f in app_functions()}


def configmap_host_config(environ: dict[str, str]) -> HostConfig:
    """The worker's configuration in Kubernetes: the ConfigMap's host.yaml plus the Deployment's WORKER__ variables."""
    config_name = volume("config")["configMap"]["name"]
    text = one("ConfigMap", config_name)["data"]["host.yaml"]
    return host_config_from_text(text, environ)


def host_config_from_text(text: str, environ: dict[str, str]) -> HostConfig:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "host.yaml"
        path.write_text(text, encoding="utf-8")
        return load_config(path, environ={k: v for k, v in environ.items() if k.startswith("WORKER__")})


def volume(name: str) -> dict[str, Any]:
    for vol in pod_spec().get("volumes", []):
        if vol["name"] == name:
            return vol
    raise AssertionError(f"the pod has no volume {name!r}")


def mount_covering(path: str) -> dict[str, Any] | None:
    """The volume mount that ``path`` lies in (the deepest one), or None."""
    best = None
    for mount in worker_container().get("volumeMounts", []):
        root = PurePosixPath(mount["mountPath"])
        target = PurePosixPath(path)
        if (target == root or root in target.parents) and (
            best is None or len(root.parts) > len(PurePosixPath(best["mountPath"]).parts)
        ):
            best = mount
    return best


def container_port(port: int | str) -> int:
    """A probe's port (a number or the name of a container port) as a number."""
    if isinstance(port, int):
        return port
    for declared in worker_container().get("ports", []):
        if declared.get("name") == port:
            return declared["containerPort"]
    raise AssertionError(f"no container port is named {port!r}")


# ----------------------------------------------------------------------------------------- schema validation


BUILTIN_OBJECTS = [(f, obj) for f, obj in k8s_objects() if not obj["apiVersion"].startswith("keda.sh/")]


def test_every_object_is_a_builtin_or_a_keda_object() -> None:
    """So that nothing escapes both the schema validation and the KEDA checks below."""
    for file, obj in k8s_objects():
        assert {"apiVersion", "kind", "metadata"} <= obj.keys(), f"{file}: not a Kubernetes object"
        if obj["apiVersion"].startswith("keda.sh/"):
            assert obj["apiVersion"] == KEDA_API and obj["kind"] in KEDA_KINDS, f"{file}: unexpected KEDA object"
    kinds = {obj["kind"] for _, obj in k8s_objects()}
    assert {"Deployment", "ConfigMap", "Secret", "ScaledObject", "TriggerAuthentication"} <= kinds


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(("file", "obj"), BUILTIN_OBJECTS, ids=[f"{f}:{o['kind']}" for f, o in BUILTIN_OBJECTS])
def test_builtin_objects_match_the_kubernetes_schema(file: str, obj: dict[str, Any], version: str) -> None:
    """Strict schemas: unknown fields (a typo such as ``livenesProbe``) fail too, as kubectl's validation would."""
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate is not installed (it belongs in the test extra)"
    )
    problem = None
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        problem = f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"
    name = f"{obj['kind']}/{obj['metadata']['name']}"
    assert problem is None, f"{file}: {name} is not valid for Kubernetes {version}: {problem}"


def test_the_schema_validation_can_fail() -> None:
    """The validator rejects a misspelt field, so a passing run above means something."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    broken = json.loads(json.dumps(deployment()))
    broken["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {"httpGet": {"path": "/healthz"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def strict(schema: Any) -> Any:
    """A CRD's openAPIV3Schema as the API server applies it with strict field validation (kubectl's default): an
    object schema that lists its properties accepts no other field, unless it preserves unknown fields."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    tightened = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        tightened["additionalProperties"] = False
    return tightened


@functools.cache
def keda_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """(apiVersion, kind) -> a validator of the strict schema KEDA's CRD serves for it. Draft 4: an OpenAPI 3.0
    schema object is JSON Schema of that generation (the ``x-kubernetes-*`` and ``format`` keywords are ignored)."""
    validators = {}
    for path in sorted(KEDA_CRDS.glob("*.yaml")):
        (crd,) = yaml_documents(path)
        assert crd["kind"] == "CustomResourceDefinition", f"{path.name} is not a CustomResourceDefinition"
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schema = strict(version["schema"]["openAPIV3Schema"])
                jsonschema.Draft4Validator.check_schema(schema)
                key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
                validators[key] = jsonschema.Draft4Validator(schema)
    return validators


def validate_keda(obj: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError (the most relevant error) unless KEDA's CRD schema accepts ``obj``, and
    kubernetes_validate.ValidationError (a subclass) unless its metadata is a valid ObjectMeta (the API server checks
    metadata itself, the CRD's schema leaves it open): checked as a ConfigMap's, the same ObjectMeta, for every
    Kubernetes version checked."""
    import kubernetes_validate

    validator = keda_validators().get((obj["apiVersion"], obj["kind"]))
    assert validator is not None, f"no KEDA CRD in {KEDA_CRDS} serves {obj['apiVersion']} {obj['kind']}"
    error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
    if error is not None:
        raise error
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}, version, strict=True
        )


KEDA_OBJECTS = [(f, obj) for f, obj in k8s_objects() if obj["apiVersion"].startswith("keda.sh/")]


@pytest.mark.parametrize(("file", "obj"), KEDA_OBJECTS, ids=[f"{f}:{o['kind']}" for f, o in KEDA_OBJECTS])
def test_keda_objects_match_kedas_crd_schemas(file: str, obj: dict[str, Any]) -> None:
    """The ScaledObject and the TriggerAuthentication, as KEDA's CRDs define them: no unknown field (a misspelt
    ``pollingIntervall``), the right types (``queueLength`` a string, ``maxReplicaCount`` a number), what is required."""
    try:
        validate_keda(obj)
    except jsonschema.ValidationError as error:
        where = ".".join(str(p) for p in error.absolute_path) or "(the object)"
        pytest.fail(
            f"{file}: {obj['kind']}/{obj['metadata']['name']} is not valid for KEDA's CRD: {where}: {error.message}",
            pytrace=False,
        )


def test_kustomization_lists_every_manifest_but_the_example_secret() -> None:
    kustomization = yaml_documents(K8S / "kustomization.yaml")[0]
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed)), "a resource is listed twice"
    for resource in listed:
        assert (K8S / resource).is_file(), f"kustomization.yaml lists {resource}, which does not exist"
    # Applying the example would replace the real connection string with its placeholder on every apply.
    expected = {p.name for p in manifest_files()} - {"secret.example.yaml"}
    assert set(listed) == expected
    images = {image["name"] for image in kustomization.get("images", [])}
    image_name = worker_container()["image"].rsplit(":", 1)[0]
    assert image_name in images, "kustomization.yaml's images: should let the worker's image be set"


def kustomize_build() -> list[dict[str, Any]]:
    """What ``kubectl apply -k deploy/k8s`` would send: ``kubectl kustomize``'s output, rendered offline."""
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not installed: it renders deploy/k8s with its built-in kustomize"
    rendered = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=False)
    assert rendered.returncode == 0, f"kubectl kustomize deploy/k8s exited {rendered.returncode}: {rendered.stderr}"
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc is not None]


@pytest.mark.subprocess
def test_kustomize_renders_the_objects_these_tests_check_and_kubernetes_accepts_them() -> None:
    """The objects kustomize renders are the ones the files hold (the image set by ``images:``), so that every
    check here holds for what is applied; and each built-in one is valid for every Kubernetes version checked."""
    import kubernetes_validate

    kustomization = yaml_documents(K8S / "kustomization.yaml")[0]
    images = {i["name"]: f"{i.get('newName', i['name'])}:{i['newTag']}" for i in kustomization["images"]}
    expected = []
    for resource in kustomization["resources"]:
        for obj in yaml_documents(K8S / resource):
            obj = json.loads(json.dumps(obj))
            for container in obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                container["image"] = images.get(container["image"].rsplit(":", 1)[0], container["image"])
            expected.append(obj)

    def key(obj: dict[str, Any]) -> tuple[str, str]:
        return obj["kind"], obj["metadata"]["name"]

    rendered = kustomize_build()
    assert sorted(rendered, key=key) == sorted(expected, key=key)
    for obj in rendered:
        if obj["apiVersion"].startswith("keda.sh/"):
            validate_keda(obj)
            continue
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


#: Faults written into a copy of the rendered ScaledObject: each must fail KEDA's schema, where kubectl apply would.
KEDA_FAULTS = {
    "a misspelt field": (("spec",), "pollingIntervall", 15),
    "a misspelt trigger field": (("spec", "triggers", 0), "authenticationRefs", {"name": "queueworker-storage"}),
    "a number for a string": (("spec", "triggers", 0, "metadata"), "queueLength", 16),
    "a string for a number": (("spec",), "maxReplicaCount", "5"),
    "an unknown HPA behaviour field": (
        ("spec", "advanced", "horizontalPodAutoscalerConfig", "behavior", "scaleDown"),
        "stabilisationWindowSeconds",
        300,
    ),
    "a misspelt metadata field": (("metadata",), "lables", {"app.kubernetes.io/name": "queueworker"}),
}


@pytest.mark.subprocess
@pytest.mark.parametrize("fault", list(KEDA_FAULTS))
def test_the_keda_schema_validation_fails_on_a_wrong_field(fault: str) -> None:
    """A copy of the ScaledObject as kustomize renders it, with one fault written in: KEDA's schema rejects it,
    naming the place, so that the passing validations above mean something."""
    (rendered,) = [obj for obj in kustomize_build() if obj["kind"] == "ScaledObject"]
    validate_keda(rendered)  # as rendered, it is valid
    path, field, value = KEDA_FAULTS[fault]
    broken = json.loads(json.dumps(rendered))
    parent = functools.reduce(lambda node, step: node[step], path, broken)
    parent[field] = value
    with pytest.raises(jsonschema.ValidationError) as raised:
        validate_keda(broken)
    assert list(raised.value.absolute_path)[: len(path)] == list(path), raised.value
    assert field in str(raised.value.absolute_path) + raised.value.message, raised.value.message


# ---------------------------------------------------------------------------------------------- Deployment


def test_probes_hit_the_worker_endpoints_on_the_http_port() -> None:
    container = worker_container()
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert container_port(container[probe]["httpGet"]["port"]) == HTTP_PORT, probe
    assert HTTP_PORT in [p["containerPort"] for p in container["ports"]]
    # The worker serves its endpoints only when worker.httpPort is set: here through the environment.
    assert literal_env(container).get("WORKER__worker__httpPort") == str(HTTP_PORT)
    assert configmap_host_config(literal_env(container)).http_port == HTTP_PORT


def test_grace_period_is_longer_than_the_drain_timeout() -> None:
    """SIGTERM starts the drain; Kubernetes kills the pod terminationGracePeriodSeconds later."""
    config = configmap_host_config(literal_env(worker_container()))
    grace = pod_spec()["terminationGracePeriodSeconds"]
    assert grace >= config.drain_timeout + SHUTDOWN_MARGIN, (
        f"terminationGracePeriodSeconds {grace} leaves no room after drainTimeout {config.drain_timeout}s"
    )
    # The ConfigMap states drainTimeout itself rather than relying on the default.
    text = one("ConfigMap", volume("config")["configMap"]["name"])["data"]["host.yaml"]
    assert parse_duration(yaml.safe_load(text)["worker"]["drainTimeout"]) == config.drain_timeout


def test_the_configmap_host_yaml_is_mounted_where_config_points() -> None:
    container = worker_container()
    config_path = option(container["args"], "--config")
    mount = mount_covering(config_path)
    assert mount is not None, f"--config {config_path} is not on a mounted volume"
    source = volume(mount["name"])
    assert "configMap" in source, f"--config {config_path} is not the ConfigMap's host.yaml"
    key = mount.get("subPath") or PurePosixPath(config_path).relative_to(mount["mountPath"]).as_posix()
    assert key in one("ConfigMap", source["configMap"]["name"])["data"], f"the ConfigMap has no key {key}"
    assert mount.get("readOnly") is True


def test_the_worker_can_write_where_it_writes() -> None:
    """.worker beside host.yaml (Spark's log), /tmp (Spark's scratch) and the warehouse are writable volumes."""
    container = worker_container()
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    config_dir = posixpath.dirname(option(container["args"], "--config"))
    warehouse = literal_env(container)["PIPELINE_WAREHOUSE"]
    for path in (f"{config_dir}/.worker", "/tmp", warehouse):
        mount = mount_covering(path)
        assert mount is not None, f"{path} is on the read-only root file system"
        assert not mount.get("readOnly"), f"{path} is mounted read-only"
        assert "configMap" not in volume(mount["name"]) and "secret" not in volume(mount["name"]), path


def test_the_warehouse_is_on_a_claim_that_exists() -> None:
    mount = mount_covering(literal_env(worker_container())["PIPELINE_WAREHOUSE"])
    assert mount is not None
    claim = volume(mount["name"])["persistentVolumeClaim"]["claimName"]
    pvc = one("PersistentVolumeClaim", claim)
    # Every replica reads what the others wrote: ingest, aggregate and report may run in different pods.
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]


def test_the_connection_comes_from_the_secret() -> None:
    env = {e["name"]: e for e in worker_container()["env"]}
    for function in app_functions():
        # A sample function names no connection: AzureWebJobsStorage, which must then be set, or it would run
        # on a file inside the pod.
        setting = function.connection or "AzureWebJobsStorage"
        assert setting in env, f"no environment variable {setting} for {function.name}"
        ref = env[setting]["valueFrom"]["secretKeyRef"]
        secret = one("Secret", ref["name"])
        values = {**secret.get("stringData", {}), **secret.get("data", {})}
        assert ref["key"] in values, f"secret.example.yaml has no key {ref['key']}"


def test_the_secret_is_an_example_with_a_placeholder() -> None:
    (secret,) = yaml_documents(K8S / "secret.example.yaml")
    values = {**secret.get("stringData", {})}
    assert values and not secret.get("data"), "the example holds its placeholder as stringData"
    for value in values.values():
        assert "<" in value and ">" in value, "the example Secret must hold a <placeholder>, not a connection string"
        assert DEV_ACCOUNT_KEY not in value
    assert "EXAMPLE" in (K8S / "secret.example.yaml").read_text(encoding="utf-8")


def test_the_pod_runs_as_the_images_unprivileged_user() -> None:
    security = pod_spec()["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security.get("runAsUser", 1) != 0
    container = worker_container()["securityContext"]
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"]["drop"] == ["ALL"]


def test_resources_fit_local_spark() -> None:
    resources = worker_container()["resources"]
    requests, limits = resources["requests"], resources["limits"]
    assert cpu_millis(requests["cpu"]) >= 1000
    assert memory_bytes(requests["memory"]) >= 2 * 2**30
    assert cpu_millis(limits["cpu"]) >= cpu_millis(requests["cpu"])
    assert memory_bytes(limits["memory"]) >= memory_bytes(requests["memory"])
    # Spark's driver JVM heap, plus the JVM's own memory and the Python process, fits the memory limit.
    config = configmap_host_config(literal_env(worker_container()))
    heap = jvm_memory_bytes(from_config(config).conf.get("spark.driver.memory", "1g"))
    assert heap + 2**30 <= memory_bytes(limits["memory"])


def test_the_command_runs_the_sample_app() -> None:
    args = worker_container()["args"]
    assert args[0] == "run"
    assert option(args, "--app") == "functions.function_app:app"
    assert "command" not in worker_container(), "the image's ENTRYPOINT (worker, exec form) must stay PID 1"


# ------------------------------------------------------------------------------------------------------ KEDA


def scaled_object() -> dict[str, Any]:
    obj = one("ScaledObject")
    assert obj["apiVersion"] == KEDA_API
    return obj


def test_scaled_object_targets_the_deployment() -> None:
    spec = scaled_object()["spec"]
    target = spec["scaleTargetRef"]
    assert target["name"] == deployment()["metadata"]["name"]
    assert target.get("kind", "Deployment") == "Deployment"
    assert target.get("apiVersion", "apps/v1") == "apps/v1"
    assert 0 <= spec.get("minReplicaCount", 0) <= spec["maxReplicaCount"]
    assert spec["maxReplicaCount"] >= 1


def test_scaled_object_has_an_azure_queue_trigger_for_each_trigger_queue() -> None:
    triggers = scaled_object()["spec"]["triggers"]
    assert triggers, "no triggers"
    for trigger in triggers:
        assert trigger["type"] == "azure-queue"
        length = trigger["metadata"]["queueLength"]
        assert isinstance(length, str) and length.isdigit() and int(length) > 0, (
            "queueLength is a string holding a positive whole number (KEDA's metadata values are strings)"
        )
    queues = [t["metadata"]["queueName"] for t in triggers]
    assert sorted(queues) == sorted(trigger_queues()) == ["aggregate", "ingest", "report"]


def test_triggers_authenticate_with_the_workers_secret() -> None:
    deployment_ref = {e["name"]: e for e in worker_container()["env"]}["AzureWebJobsStorage"]["valueFrom"]["secretKeyRef"]
    for trigger in scaled_object()["spec"]["triggers"]:
        assert "connection" not in trigger["metadata"], "a connection string in the ScaledObject would be in the clear"
        ref = trigger.get("authenticationRef")
        assert ref, f"trigger for {trigger['metadata']['queueName']} has no authenticationRef"
        assert ref.get("kind", "TriggerAuthentication") == "TriggerAuthentication"
        auth = one("TriggerAuthentication", ref["name"])
        assert auth["apiVersion"] == KEDA_API
        targets = {t["parameter"]: t for t in auth["spec"].get("secretTargetRef", [])}
        if "connection" in targets:
            assert (targets["connection"]["name"], targets["connection"]["key"]) == (
                deployment_ref["name"],
                deployment_ref["key"],
            )
        else:
            env_name = trigger["metadata"].get("connectionFromEnv")
            assert env_name == "AzureWebJobsStorage", "the scaler reads neither the Secret nor the worker's variable"


# --------------------------------------------------------------------------------------------------- Compose


def compose() -> dict[str, Any]:
    return yaml_documents(COMPOSE)[0]


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_compose_worker_reaches_azurite_by_service_name() -> None:
    services = compose()["services"]
    azurite, worker = services["azurite"], services["worker"]
    env = service_env(worker)
    connection = parse_connection_string(env["AzureWebJobsStorage"])
    endpoint = urlparse(connection.queue_endpoint)
    assert endpoint.hostname == "azurite", "inside the worker's container, Azurite is the azurite service"
    command = azurite["command"]
    queue_port = int(option(command, "--queuePort")) if "--queuePort" in command else 10001
    assert endpoint.port == queue_port
    assert endpoint.path.strip("/") == DEV_ACCOUNT
    assert (connection.account_name, connection.account_key) == (DEV_ACCOUNT, DEV_ACCOUNT_KEY)
    assert worker["depends_on"]["azurite"]["condition"] == "service_healthy"
    assert azurite["healthcheck"]["test"]


def test_compose_healthchecks_are_in_shell_form() -> None:
    """podman-compose 1.0 (Debian 12's) quotes an exec-form (``CMD``) test holding parentheses into a shell syntax
    error, so that the check always fails there; the shell form (``CMD-SHELL``, one string) runs under it and Docker
    Compose alike."""
    for name, service in compose()["services"].items():
        test = service["healthcheck"]["test"]
        assert test[0] == "CMD-SHELL" and len(test) == 2, f"{name}: healthcheck test {test!r} is not in shell form"


def test_compose_azurite_runs_the_queue_service_like_the_tests() -> None:
    azurite = compose()["services"]["azurite"]
    command = azurite["command"]
    assert command[0] == "azurite-queue"
    assert option(command, "--queueHost") == "0.0.0.0"
    assert {"--loose", "--skipApiVersionCheck", "--disableTelemetry"} <= set(command)
    location = option(command, "--location") if "--location" in command else "/data"
    named = {v.split(":")[0]: v.split(":")[1] for v in azurite["volumes"]}
    assert location in named.values(), "Azurite's data is not on a volume"
    assert set(named) <= set(compose().get("volumes", {})), "Azurite's volume is not a declared named volume"


def test_compose_azurite_is_built_here_from_the_lock_of_the_tests() -> None:
    """Azurite is built from deploy/azurite.Dockerfile, which installs package-lock.json's Azurite (the version the
    suite runs) with ``npm ci``; its image's default name carries that version."""
    azurite = compose()["services"]["azurite"]
    context = (COMPOSE.parent / azurite["build"]["context"]).resolve()
    assert context == REPO, "the build context is the repository root, where package.json and its lock are"
    assert (context / azurite["build"]["dockerfile"]).resolve() == AZURITE_DOCKERFILE
    locked = locked_azurite()
    pinned = json.loads(PACKAGE_JSON.read_text(encoding="utf-8"))["devDependencies"]["azurite"]
    assert pinned == locked, f"package.json pins Azurite {pinned}, its lock installs {locked}"
    _, _, tag = compose_default(azurite["image"]).rpartition(":")
    assert tag == locked, f"compose.yaml names Azurite {tag}, package-lock.json installs {locked}"


def test_compose_images_are_built_here_and_name_no_registry() -> None:
    """Every service is built from this repository (a machine that reaches no image registry can run the file), and
    its image's default name is a short one, which neither Compose nor podman resolves to a registry's host."""
    for name, service in compose()["services"].items():
        build = service.get("build")
        assert build and (COMPOSE.parent / build["context"] / build["dockerfile"]).is_file(), (
            f"{name} is not built from a Dockerfile of this repository"
        )
        image = compose_default(service["image"])
        first = image.split("/")[0]
        assert "/" not in image or not ("." in first or ":" in first or first == "localhost"), (
            f"{name}'s image {image} names a registry"
        )
        assert "$" not in image and ":" in image, f"{name}'s image {service['image']} has no default with a tag"


def test_compose_publishes_every_port_on_loopback_only() -> None:
    """Azurite's key is public and /leases names the messages in flight: nothing reaches past this machine."""
    published = [(name, port) for name, service in compose()["services"].items() for port in service.get("ports", [])]
    assert published, "compose.yaml publishes no port"
    for name, port in published:
        # A port's variables (``${WORKER_PORT:-8080}``) as their defaults: the host's port is not what is checked.
        host_ip = (
            port.get("host_ip")
            if isinstance(port, dict)
            else compose_default(str(port)).rpartition(":")[0].rpartition(":")[0]
        )
        assert host_ip == "127.0.0.1", f"{name} publishes {port!r} on every interface of the host"


def test_compose_stop_grace_period_is_longer_than_the_drain_timeout() -> None:
    worker = compose()["services"]["worker"]
    env = service_env(worker)
    # The image's host.yaml is the repository's.
    config = load_config(REPO / "host.yaml", environ={k: v for k, v in env.items() if k.startswith("WORKER__")})
    assert worker.get("stop_signal", "SIGTERM") == "SIGTERM"
    grace = parse_duration(worker["stop_grace_period"])
    assert grace >= config.drain_timeout + SHUTDOWN_MARGIN, (
        f"stop_grace_period {worker['stop_grace_period']} leaves no room after drainTimeout {config.drain_timeout}s"
    )


def test_the_stop_timeout_given_for_podman_and_docker_run_is_longer_than_the_drain_timeout() -> None:
    """``podman stop`` and ``docker stop`` kill after 10 s unless the container was run with ``--stop-timeout``."""
    config = load_config(REPO / "host.yaml", environ={})
    assert documented_stop_timeout() >= config.drain_timeout + SHUTDOWN_MARGIN, (
        f"--stop-timeout {documented_stop_timeout()} leaves no room after drainTimeout {config.drain_timeout}s"
    )


def test_compose_worker_is_built_from_the_dockerfile_with_a_healthcheck() -> None:
    worker = compose()["services"]["worker"]
    context = (COMPOSE.parent / worker["build"]["context"]).resolve()
    assert context == REPO, "the build context is the repository root"
    assert (context / worker["build"]["dockerfile"]).resolve() == (REPO / "deploy" / "Dockerfile")
    env = service_env(worker)
    assert env["WORKER__worker__httpPort"] == str(HTTP_PORT)
    assert any(str(p).endswith(f":{HTTP_PORT}") for p in worker["ports"])
    test = worker["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL" and f":{HTTP_PORT}/healthz" in test[1]
    assert env["PIPELINE_WAREHOUSE"].startswith("/data/")
    assert any(v.split(":")[1] == "/data" for v in worker["volumes"])
