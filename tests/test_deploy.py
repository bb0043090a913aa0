"""deploy/: the Kubernetes manifests are valid objects and agree with each other and the CLI.

Schema validation is offline: `kubernetes-validate` ships the Kubernetes JSON schemas.
Checked for the oldest Kubernetes minor we document (1.29) and the newest it ships.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
K8S = DEPLOY / "kubernetes"
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())


def _objects() -> dict[str, dict]:
    objects = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] != "Kustomization":
                objects[doc["kind"]] = doc
    return objects


OBJECTS = _objects()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", sorted(OBJECTS))
def test_manifest_validates_against_the_kubernetes_schema(kind, version):
    kubernetes_validate.validate(OBJECTS[kind], version, strict=True)


def test_the_validator_refuses_a_broken_manifest():
    """The check above can fail: a misspelt probe field is an error in strict mode."""
    broken = yaml.safe_load((K8S / "deployment.yaml").read_text())
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pth"] = "/health"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[0], strict=True)


def test_every_object_is_in_the_kustomization():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    assert set(OBJECTS) == {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Secret"}


def test_the_objects_point_at_each_other():
    dep, svc, hpa, pdb, secret = (OBJECTS[k] for k in
                                  ("Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Secret"))
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    for selector in (dep["spec"]["selector"]["matchLabels"], svc["spec"]["selector"], pdb["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= pod_labels.items()
    assert (hpa["spec"]["scaleTargetRef"]["kind"], hpa["spec"]["scaleTargetRef"]["name"]) == ("Deployment", dep["metadata"]["name"])
    assert "render_service_saturation" in [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    assert hpa["spec"]["minReplicas"] > pdb["spec"]["minAvailable"]

    container = dep["spec"]["template"]["spec"]["containers"][0]
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert svc["spec"]["ports"][0]["targetPort"] in port_names
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"
        assert container[probe]["httpGet"]["port"] in port_names
    key_ref = next(e["valueFrom"]["secretKeyRef"] for e in container["env"] if e["name"] == "RENDER_SERVICE_STATE_SECRET")
    assert key_ref["name"] == secret["metadata"]["name"] and key_ref["key"] in secret["stringData"]


def test_container_args_are_serve_flags():
    """The Deployment's args parse with `render-service serve` (a renamed flag breaks the pod)."""
    import argparse

    from render_service.serve.cli import add_serve_parser

    parser = argparse.ArgumentParser(exit_on_error=False)
    add_serve_parser(parser.add_subparsers())
    args = OBJECTS["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    parsed = parser.parse_args(["serve", "--host", "0.0.0.0", "--port", "8000", *args])
    assert parsed.workers == 2


def test_llm_d_token_producer_points_at_the_service():
    config = yaml.safe_load((DEPLOY / "llm-d" / "endpoint-picker-config.yaml").read_text())
    producer = next(p for p in config["plugins"] if p["type"] == "token-producer")
    url = urlsplit(producer["parameters"]["vllm"]["url"])
    svc = OBJECTS["Service"]
    assert url.hostname.split(".")[0] == svc["metadata"]["name"]
    assert url.port == svc["spec"]["ports"][0]["port"]


def _serve_config():
    """The `ServeConfig` the Deployment's container runs with."""
    import argparse

    from render_service.serve.cli import add_serve_parser
    from render_service.serve.flags import serve_config

    parser = argparse.ArgumentParser(exit_on_error=False)
    add_serve_parser(parser.add_subparsers())
    container = OBJECTS["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    return serve_config(parser.parse_args(["serve", "--host", "0.0.0.0", "--port", "8000", *container["args"]])), container


def test_the_pod_serves_the_model_llm_d_routes():
    """The Deployment serves a real model (not the embedded SmolLM2 default) under the name the
    llm-d example routes on."""
    config, _ = _serve_config()
    producer = next(p for p in yaml.safe_load((DEPLOY / "llm-d" / "endpoint-picker-config.yaml").read_text())["plugins"]
                    if p["type"] == "token-producer")
    assert config.model, "the Deployment must pass --model"
    served = (config.served_model_name or (config.model,))[0]
    assert served == producer["parameters"]["modelName"]


def test_the_model_has_somewhere_to_come_from():
    """A hub id needs a writable cache on a mounted volume (the root filesystem is read-only);
    a directory must be on a mounted volume."""
    import os

    _, container = _serve_config()
    args = dict(a.lstrip("-").split("=", 1) for a in container["args"] if "=" in a)
    mounts = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    volumes = {v["name"]: v for v in OBJECTS["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert container["securityContext"]["readOnlyRootFilesystem"]
    model = args["model"]
    if model.startswith("/"):
        path = model
    else:
        assert "download-dir" in args, "a hub id needs --download-dir on a writable volume"
        path = args["download-dir"]
        home = next(e["value"] for e in container["env"] if e["name"] == "HF_HOME")
        assert any(home == m or home.startswith(m + "/") for m in mounts)
    mount = next((m for m in mounts if path == m or path.startswith(m + "/")), None)
    assert mount, f"{path} is on no mounted volume"
    name = next(m["name"] for m in container["volumeMounts"] if m["mountPath"] == mount)
    assert name in volumes and os.path.normpath(path).startswith(mount)


def _gib(quantity: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 1e3, "M": 1e6, "G": 1e9}
    for suffix, scale in units.items():
        if quantity.endswith(suffix):
            return float(quantity[:-len(suffix)]) * scale / 2**30
    return float(quantity) / 2**30


WORKER_BASELINE_GIB = 1.0  # one worker's tokenizer, template and runtime (deploy/README.md)


def test_the_memory_limit_fits_the_workers_and_their_media_cache():
    config, container = _serve_config()
    limit = _gib(container["resources"]["limits"]["memory"])
    assert limit >= config.workers * (config.mm_processor_cache_gb + WORKER_BASELINE_GIB)
    assert _gib(container["resources"]["requests"]["memory"]) <= limit


def test_the_memory_check_can_fail():
    """The sum above with the defaults (4 GiB media cache per worker) does not fit 4 GiB."""
    from render_service.config.serve import ServeConfig

    assert 4 < 2 * (ServeConfig().mm_processor_cache_gb + WORKER_BASELINE_GIB)


GATEWAY = DEPLOY / "gateway"


def _gateway_objects() -> dict[str, dict]:
    return {doc["kind"]: doc for path in sorted(GATEWAY.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc and doc["kind"] != "Kustomization"}


def test_gateway_objects_are_crds_the_validator_does_not_know():
    """kubernetes-validate ships only the core schemas: the Gateway API and Envoy Gateway objects
    are refused with SchemaNotFoundError, not validated, so their shape is checked below."""
    for obj in _gateway_objects().values():
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(obj, VERSIONS[-1], strict=True)


def test_the_gateway_hashes_on_the_session_header_the_server_echoes():
    """HTTPRoute -> the Service; BackendTrafficPolicy -> that route, consistent hash on the header
    every render answer carries (Envoy Gateway's rules: a ConsistentHash needs `consistentHash`,
    type Header needs `header`, api/v1alpha1/loadbalancer_types.go)."""
    from render_service.http.session_key import HEADER

    objects = _gateway_objects()
    assert set(objects) == {"Gateway", "HTTPRoute", "BackendTrafficPolicy"}
    kustomization = yaml.safe_load((GATEWAY / "kustomization.yaml").read_text())
    assert set(kustomization["resources"]) == {p.name for p in GATEWAY.glob("*.yaml")} - {"kustomization.yaml"}
    gateway, route, policy = objects["Gateway"], objects["HTTPRoute"], objects["BackendTrafficPolicy"]
    assert route["spec"]["parentRefs"] == [{"name": gateway["metadata"]["name"]}]
    (backend,) = route["spec"]["rules"][0]["backendRefs"]
    svc = OBJECTS["Service"]
    assert (backend["name"], backend["port"]) == (svc["metadata"]["name"], svc["spec"]["ports"][0]["port"])
    (target,) = policy["spec"]["targetRefs"]
    assert target == {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route["metadata"]["name"]}
    balancer = policy["spec"]["loadBalancer"]
    assert set(balancer) == {"type", "consistentHash"} and balancer["type"] == "ConsistentHash"
    assert set(balancer["consistentHash"]) == {"type", "header"} and balancer["consistentHash"]["type"] == "Header"
    assert set(balancer["consistentHash"]["header"]) == {"name"}
    assert balancer["consistentHash"]["header"]["name"].lower().encode() == HEADER


def test_haproxy_reads_the_callers_headers_the_server_reads():
    from render_service.http.session_key import CALLER_HEADERS

    config = (DEPLOY / "haproxy" / "haproxy.cfg").read_text()
    assert [h.decode() for h in CALLER_HEADERS] == re.findall(r"set-var\(txn\.key\) req\.hdr\(([\w-]+)\)", config)
