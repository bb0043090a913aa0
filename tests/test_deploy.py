"""deploy/: the Kubernetes manifests are valid objects and agree with each other and the CLI.

Schema validation is offline: `kubernetes-validate` ships the Kubernetes JSON schemas.
Checked for the oldest Kubernetes minor we document (1.29) and the newest it ships.
"""

from __future__ import annotations

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
