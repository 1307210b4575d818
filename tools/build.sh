#!/usr/bin/env bash
# Build the real servers the test suite runs against, from their pinned Go modules (tools/*/go.mod).
#
#   tools/build.sh [NAME ...]     # default: every tool
#
# Each binary lands in .tools/NAME/VERSION/ and .tools/bin/NAME links to it; a binary that exists
# for the version its go.mod pins is not built again. Versions come from the go.mod files only.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=$ROOT/.tools
export CGO_ENABLED=0 GOFLAGS=-mod=mod

# version MODULE_DIR MODULE_PATH: the version that tools/MODULE_DIR/go.mod selects for MODULE_PATH
version() { (cd "tools/$1" && go list -m -f '{{.Version}}' "$2"); }

# build_tool NAME VERSION BINARY_NAME -- GO BUILD ARGS...: build into .tools/NAME/VERSION unless there
build_tool() {
  local name=$1 version=$2 binary=$3; shift 4
  local dest=$TOOLS/$name/$version/$binary
  if [[ ! -x $dest ]]; then
    echo "building $name $version" >&2
    mkdir -p "$(dirname "$dest")"
    local started=$SECONDS
    (cd "tools/$name" && go build -trimpath -o "$dest.tmp" "$@")
    mv "$dest.tmp" "$dest"
    echo "built $name $version in $((SECONDS - started))s" >&2
  fi
  mkdir -p "$TOOLS/bin"
  ln -sfn "../$name/$version/$binary" "$TOOLS/bin/$binary"
}

opa() {
  local v; v=$(version opa github.com/open-policy-agent/opa)
  build_tool opa "$v" opa -- -ldflags "-s -w -X github.com/open-policy-agent/opa/v1/version.Version=${v#v}" github.com/open-policy-agent/opa
}

etcd() {
  local v; v=$(version etcd go.etcd.io/etcd/server/v3)
  build_tool etcd "$v" etcd -- -ldflags "-s -w" go.etcd.io/etcd/server/v3
}

# kube-apiserver, kube-controller-manager and kube-scheduler: one module, k8s.io/kubernetes with its staging modules.
kubernetes() {
  local binary=$1 v minor pkg=k8s.io/component-base/version
  v=$(version kubernetes k8s.io/kubernetes)
  minor=$(cut -d. -f2 <<<"$v")
  build_tool kubernetes "$v" "$binary" -- -pgo=off -ldflags "-s -w -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$v" \
    "k8s.io/kubernetes/cmd/$binary"
}
kube-apiserver() { kubernetes kube-apiserver; }
kube-controller-manager() { kubernetes kube-controller-manager; }
kube-scheduler() { kubernetes kube-scheduler; }

pulumi() {
  local v; v=$(version pulumi github.com/pulumi/pulumi/pkg/v3)
  build_tool pulumi "$v" pulumi -- -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$v" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
}

# The provider module is served only at a pseudo-version; a "// release:" line in its go.mod names the release.
pulumi-kubernetes() {
  local mod=github.com/pulumi/pulumi-kubernetes/provider/v4 v dir
  v=$(sed -n "s/^\/\/ release: v\([0-9.]*\)$/\1/p" tools/pulumi-kubernetes/go.mod)
  dir=$(cd tools/pulumi-kubernetes && go mod download "$mod" && go list -m -f '{{.Dir}}' "$mod")  # a cold module cache has no Dir yet
  # Upstream's main embeds these generated files; ours embeds the same ones, copied from the module.
  cp -f "$dir/cmd/pulumi-resource-kubernetes/schema.json" "$dir/cmd/pulumi-resource-kubernetes/terraform-mapping.json" tools/pulumi-kubernetes/
  chmod u+w tools/pulumi-kubernetes/*.json
  build_tool pulumi-kubernetes "v$v" pulumi-resource-kubernetes -- -ldflags "-s -w -X $mod/pkg/version.Version=$v" .
}

# Kueue's CRDs, webhook configurations and default Configuration come from the same module, beside
# its binary: the tests install exactly what this Kueue serves (fleetops/crds/ holds the schemas
# render checks).
kueue() {
  local mod=sigs.k8s.io/kueue v dir dest
  v=$(version kueue "$mod")
  build_tool kueue "$v" kueue -- -ldflags "-s -w -X $mod/pkg/version.GitVersion=$v" "$mod/cmd/kueue"
  dir=$(cd tools/kueue && go mod download "$mod" && go list -m -f '{{.Dir}}' "$mod")
  dest=$TOOLS/kueue/$v
  if [[ ! -f $dest/webhooks.yaml ]]; then
    mkdir -p "$dest/crds"
    cp -f "$dir"/config/components/crd/bases/*.yaml "$dest/crds/"
    cp -f "$dir/config/components/manager/controller_manager_config.yaml" "$dest/"
    cp -f "$dir/config/components/webhook/manifests.yaml" "$dest/webhooks.yaml.tmp"
    chmod -R u+w "$dest/crds" "$dest/controller_manager_config.yaml" "$dest/webhooks.yaml.tmp"
    mv "$dest/webhooks.yaml.tmp" "$dest/webhooks.yaml"
  fi
}

# prometheus-adapter: the custom and external metrics APIs the HPA controller reads, from Prometheus
# (tests/render/test_real_autoscaling.py). Its version is compiled in through the apiserver's version package.
prometheus-adapter() {
  local v; v=$(version prometheus-adapter sigs.k8s.io/prometheus-adapter)
  build_tool prometheus-adapter "$v" prometheus-adapter -- -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$v" \
    sigs.k8s.io/prometheus-adapter/cmd/adapter
}

# kube-router: its network-policy controller alone (firewall only, iptables + ipset) is the NetworkPolicy
# dataplane the probe matrix connects through (tests/render/test_real_network.py).
kube-router() {
  local mod=github.com/cloudnativelabs/kube-router/v2 v
  v=$(version kube-router "$mod")
  build_tool kube-router "$v" kube-router -- -ldflags "-s -w -X $mod/pkg/version.Version=$v" "$mod/cmd/kube-router"
}

# dashboard-strict: fleetops' own main (tools/grafana-foundation-sdk/main.go) over the SDK's Go types, which decode a
# dashboard strictly: the second reader of the dashboards the Python builders write (tests/render/test_monitoring.py).
grafana-foundation-sdk() {
  local v; v=$(version grafana-foundation-sdk github.com/grafana/grafana-foundation-sdk/go)
  build_tool grafana-foundation-sdk "$v" dashboard-strict -- -ldflags "-s -w" .
}

# prometheus-operator: the reader of the ServiceMonitors, PodMonitors and PrometheusRules fleetops renders; it writes
# the configuration Prometheus runs (tests/monitoring_stack.py). Its CRDs and upstream's RBAC for it and for Prometheus
# come from the same module, beside its binary: the tests install exactly what this operator serves.
prometheus-operator() {
  local mod=github.com/prometheus-operator/prometheus-operator v dir dest
  v=$(version prometheus-operator "$mod")
  build_tool prometheus-operator "$v" prometheus-operator -- -ldflags "-s -w -X github.com/prometheus/common/version.Version=${v#v}" "$mod/cmd/operator"
  dest=$TOOLS/prometheus-operator/$v
  if [[ ! -d $dest/crds ]]; then
    dir=$(cd tools/prometheus-operator && go mod download "$mod" && go list -m -f '{{.Dir}}' "$mod")
    rm -rf "$dest/crds.tmp" && mkdir -p "$dest/crds.tmp/rbac"
    cp -f "$dir"/example/prometheus-operator-crd/*.yaml "$dest/crds.tmp/"
    cp -f "$dir/example/rbac/prometheus-operator/prometheus-operator-cluster-role.yaml" "$dir/example/rbac/prometheus/prometheus-cluster-role.yaml" "$dest/crds.tmp/rbac/"
    chmod -R u+w "$dest/crds.tmp"
    mv "$dest/crds.tmp" "$dest/crds"
  fi
}

# Prometheus and promtool of one release, the LTS line prometheus-operator supports: the module's v0.3MM.P is
# Prometheus 3.MM.P. Without the web UI's assets (the builtinassets tag is off): the tests use its HTTP API only.
prometheus() {
  local mod=github.com/prometheus/prometheus v minor patch release
  v=$(version prometheus "$mod")
  IFS=. read -r _ minor patch <<<"${v#v}"
  release=$((minor / 100)).$((minor % 100)).$patch
  for binary in prometheus promtool; do
    build_tool prometheus "$v" "$binary" -- -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release" "$mod/cmd/$binary"
  done
}

ALL=(opa etcd kube-apiserver kube-controller-manager kube-scheduler pulumi pulumi-kubernetes kueue prometheus-adapter kube-router grafana-foundation-sdk prometheus-operator prometheus)
for tool in "${@:-${ALL[@]}}"; do
  case " ${ALL[*]} " in *" $tool "*) "$tool" ;; *) echo "tools/build.sh: unknown tool $tool (known: ${ALL[*]})" >&2; exit 2 ;; esac
done
