"""Prepare `helm template` output for offline validation.

Usage: split_manifests.py RENDERED.yaml FILTERED.yaml

Prints one line per rendered resource (kind/name), writes every resource that
kubernetes-validate can check to FILTERED.yaml, and names the custom resources
that it skips. kubernetes-validate bundles only the built-in Kubernetes
schemas, so custom resources (KubeRay's RayCluster, the Prometheus Operator's
ServiceMonitor) cannot be validated by it and are skipped here explicitly.
Every other kind goes to kubernetes-validate, which only warns about a kind it
has no schema for: .ci/helm.sh treats such a warning as a failure.
Exit status: 0 on success, 1 if a document has no kind or no metadata.name.
"""

from __future__ import annotations

import sys

import yaml

# apiVersion groups of custom resources the chart may render.
SKIPPED_GROUPS = {
    "ray.io": "KubeRay CRD",
    "monitoring.coreos.com": "Prometheus Operator CRD",
}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    keep = []
    rc = 0
    for doc in docs:
        kind = doc.get("kind")
        name = (doc.get("metadata") or {}).get("name")
        api = doc.get("apiVersion", "")
        if not kind or not name:
            print(f"  ERROR document without kind or metadata.name: {doc!r:.120}")
            rc = 1
            continue
        group = api.split("/", 1)[0] if "/" in api else ""
        hook = ((doc.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook")
        suffix = f" [hook: {hook}]" if hook else ""
        if group in SKIPPED_GROUPS:
            print(
                f"  {kind}/{name} ({api}) -- skipped: {SKIPPED_GROUPS[group]}, "
                f"no bundled schema{suffix}"
            )
            continue
        print(f"  {kind}/{name} ({api}){suffix}")
        keep.append(doc)
    with open(argv[2], "w", encoding="utf-8") as fh:
        yaml.safe_dump_all(keep, fh, sort_keys=False)
    print(f"  -> {len(docs)} resources rendered, {len(keep)} to validate")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
