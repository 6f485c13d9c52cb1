#!/usr/bin/env python3
"""The Kubernetes manifests in deploy/kubernetes/ (docs/install.md#kubernetes).

- Every manifest validates, strictly (an unknown field is an error), against the Kubernetes schemas
  of the oldest and the newest version we claim, with kubernetes-validate (PyPI, pinned by the
  caller): 1.30 is the first whose preStop `sleep` action is on by default.
- Each kustomization lists files that exist, and renames the image the workloads name.
- What the workloads promise and idem does agree: probes on /healthz and /readyz, the user the
  image runs as (deploy/container/Containerfile's USER), and a termination grace longer than the
  preStop pause plus idem's drain (conn.rs and proxy.rs's DRAIN).
- No workload mounts a service account token; a StatefulSet's serviceName is a headless Service
  beside it (clusterIP: None) and its volumes are ReadWriteOncePod (#43).

Prints `--- PASS: kubernetes-manifests` or `--- FAIL: kubernetes-manifests` with the reasons.
"""

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
KUBE = ROOT / "deploy" / "kubernetes"
VERSIONS = ["1.30.0", "1.37.0"]


def drain_seconds() -> int:
    """The longest shutdown drain idem's code names (connections, background gateway calls)."""
    found = []
    for path in ["crates/idem-server/src/conn.rs", "crates/idem-server/src/proxy.rs"]:
        text = (ROOT / path).read_text()
        found += [int(s) for s in re.findall(r"const DRAIN: Duration = Duration::from_secs\((\d+)\)", text)]
    if not found:
        raise SystemExit("no DRAIN constant found in conn.rs or proxy.rs: update scripts/check-manifests.py")
    return max(found)


def image_user() -> int:
    text = (ROOT / "deploy/container/Containerfile").read_text()
    match = re.search(r"^USER (\d+)", text, re.M)
    if not match:
        raise SystemExit("deploy/container/Containerfile has no numeric USER")
    return int(match.group(1))


def manifests() -> list[Path]:
    return sorted(p for p in KUBE.rglob("*.yaml") if p.name != "kustomization.yaml")


def schema_problems(files: list[Path]) -> list[str]:
    problems = []
    for version in VERSIONS:
        cmd = [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", "-k", version, *map(str, files)]
        run = subprocess.run(cmd, capture_output=True, text=True)
        print(f"    kubernetes-validate --strict -k {version}: {len(files)} files, exit {run.returncode}")
        if run.returncode != 0:
            problems.append((run.stdout + run.stderr).strip())
    return problems


def kustomization_problems(kustomization: Path) -> list[str]:
    k = yaml.safe_load(kustomization.read_text())
    problems = [f"{kustomization}: lists {r}, which does not exist"
                for r in k.get("resources", []) if not (kustomization.parent / r).is_file()]
    names = {i["name"] for i in k.get("images", [])}
    for resource in k.get("resources", []):
        for doc in yaml.safe_load_all((kustomization.parent / resource).read_text()):
            for c in containers(doc):
                if c["image"].split(":")[0] not in names:
                    problems.append(f"{resource}: image {c['image']} is not renamed by {kustomization.name}")
    return problems


def containers(doc: dict) -> list[dict]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("containers", [])


def workload_problems(path: Path, doc: dict, user: int, drain: int) -> list[str]:
    pod = doc["spec"]["template"]["spec"]
    problems = []
    grace = pod.get("terminationGracePeriodSeconds", 30)
    for c in pod["containers"]:
        pause = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        if grace < pause + drain + 5:
            problems.append(f"{path.name}: terminationGracePeriodSeconds {grace} < preStop {pause} s + drain {drain} s + 5")
        if c["livenessProbe"]["httpGet"]["path"] != "/healthz":
            problems.append(f"{path.name}: the liveness probe is not /healthz")
        if c["readinessProbe"]["httpGet"]["path"] != "/readyz":
            problems.append(f"{path.name}: the readiness probe is not /readyz")
        if not c.get("securityContext", {}).get("readOnlyRootFilesystem"):
            problems.append(f"{path.name}: the root filesystem is writable")
    context = pod.get("securityContext", {})
    if context.get("runAsUser") != user or not context.get("runAsNonRoot"):
        problems.append(f"{path.name}: runAsUser is not the image's user {user}, or runAsNonRoot is unset")
    if pod.get("automountServiceAccountToken") is not False:
        problems.append(f"{path.name}: automountServiceAccountToken is not false (idem never calls the Kubernetes API)")
    return problems


def statefulset_problems(path: Path, doc: dict, headless: set[tuple[Path, str]]) -> list[str]:
    spec = doc["spec"]
    problems = []
    if (path.parent, spec.get("serviceName")) not in headless:
        problems.append(f"{path.name}: serviceName {spec.get('serviceName')} is no headless Service (clusterIP: None) in {path.parent.name}/")
    for claim in spec.get("volumeClaimTemplates", []):
        if claim["spec"].get("accessModes") != ["ReadWriteOncePod"]:
            problems.append(f"{path.name}: volume claim {claim['metadata']['name']} is not ReadWriteOncePod")
    return problems


def main() -> int:
    files = manifests()
    problems = schema_problems(files)
    kinds = {}
    for kustomization in sorted(KUBE.rglob("kustomization.yaml")):
        problems += kustomization_problems(kustomization)
    user, drain = image_user(), drain_seconds()
    docs = [(path, doc) for path in files for doc in yaml.safe_load_all(path.read_text())]
    headless = {(path.parent, doc["metadata"]["name"]) for path, doc in docs
                if doc["kind"] == "Service" and doc["spec"].get("clusterIP") == "None"}
    for path, doc in docs:
        kinds.setdefault(doc["kind"], []).append(str(path.relative_to(KUBE)))
        if doc["kind"] in ("StatefulSet", "Deployment"):
            problems += workload_problems(path, doc, user, drain)
        if doc["kind"] == "StatefulSet":
            problems += statefulset_problems(path, doc, headless)
    for kind, where in sorted(kinds.items()):
        print(f"    {kind}: {', '.join(sorted(set(where)))}")
    wanted = {"StatefulSet", "Deployment", "PodDisruptionBudget", "Service", "Secret", "NetworkPolicy"}
    problems += [f"no {kind} in deploy/kubernetes" for kind in sorted(wanted - kinds.keys())]
    if problems:
        print("\n".join(f"    {p}" for p in problems))
        print("--- FAIL: kubernetes-manifests")
        return 1
    print(f"--- PASS: kubernetes-manifests (drain {drain} s, user {user})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
