#!/usr/bin/env bash
# Builds the real etcd, etcdctl, etcdutl, etcd-3.7, etcd-3.5, etcdutl-3.5, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, promtool and weed (SeaweedFS, the
# lab's S3-compatible store), and the real node's kubelet, containerd,
# containerd-shim-runc-v2, ctr, runc and CNI loopback plugin, and gofail (the
# test hooks in the agent the tests build, labtest.BuildAgent) into bin/
# from the Go module proxy. Each tool has its own module under hack/tools/ (their
# dependency graphs conflict: kubernetes 1.37 wants etcd client 3.7, the lab runs
# etcd 3.6). A stamp per binary records the module version and Go version it was
# built with, so a warm run rebuilds nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/bin"
mkdir -p "$bin/.stamps"

# The k8s binaries say which version they are (kubelet reports it as the
# Node's kubeletVersion); without these they say v0.0.0-master.
k8sver=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$root/hack/tools/kubernetes/go.mod")
k8sminor=$(echo "$k8sver" | cut -d. -f2)
k8sldflags="-X k8s.io/component-base/version.gitVersion=$k8sver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8sminor -X k8s.io/component-base/version.gitTreeState=clean"
runcver=$(awk '$1 == "github.com/opencontainers/runc" && $2 ~ /^v/ { print $2; exit }' "$root/hack/tools/runc/go.mod")

# tool name (a path under bin/) | tools module dir | main package | module
# whose version pins it | cgo (1: on) | build tags | ldflags
# promtool: remove_all_sd drops service discovery (the rule tests need none;
# it is 60% of promtool's source, docs/plans/real-node.md section 4).
# runc needs cgo and libseccomp (the DaemonSet asks for RuntimeDefault
# seccomp); its default libpathrs tag is a Rust library Debian lacks.
tools=(
  "etcd|etcd|go.etcd.io/etcd/server/v3|go.etcd.io/etcd/server/v3|0||"
  "etcdctl|etcd|go.etcd.io/etcd/etcdctl/v3|go.etcd.io/etcd/etcdctl/v3|0||"
  "etcdutl|etcd|go.etcd.io/etcd/etcdutl/v3|go.etcd.io/etcd/etcdutl/v3|0||"
  "etcd-3.7|etcd37|go.etcd.io/etcd/server/v3|go.etcd.io/etcd/server/v3|0||"
  "etcd-3.5|etcd35|go.etcd.io/etcd/server/v3|go.etcd.io/etcd/server/v3|0||"
  "etcdutl-3.5|etcd35|go.etcd.io/etcd/etcdutl/v3|go.etcd.io/etcd/etcdutl/v3|0||"
  "kube-apiserver|kubernetes|k8s.io/kubernetes/cmd/kube-apiserver|k8s.io/kubernetes|0||"
  "kube-controller-manager|kubernetes|k8s.io/kubernetes/cmd/kube-controller-manager|k8s.io/kubernetes|0||"
  "kube-scheduler|kubernetes|k8s.io/kubernetes/cmd/kube-scheduler|k8s.io/kubernetes|0||"
  "kubectl|kubernetes|k8s.io/kubernetes/cmd/kubectl|k8s.io/kubernetes|0||"
  "kubelet|kubernetes|k8s.io/kubernetes/cmd/kubelet|k8s.io/kubernetes|0||$k8sldflags"
  "promtool|promtool|github.com/prometheus/prometheus/cmd/promtool|github.com/prometheus/prometheus|0|remove_all_sd|"
  "weed|seaweedfs|github.com/seaweedfs/seaweedfs/weed|github.com/seaweedfs/seaweedfs|0||"
  "containerd|containerd|github.com/containerd/containerd/v2/cmd/containerd|github.com/containerd/containerd/v2|0||"
  "containerd-shim-runc-v2|containerd|github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2|github.com/containerd/containerd/v2|0||"
  "ctr|containerd|github.com/containerd/containerd/v2/cmd/ctr|github.com/containerd/containerd/v2|0||"
  "runc|runc|github.com/opencontainers/runc|github.com/opencontainers/runc|1|seccomp urfave_cli_no_docs|-X main.version=${runcver#v}"
  "gofail|gofail|go.etcd.io/gofail|go.etcd.io/gofail|0||"
  "cni/loopback|runc|github.com/containernetworking/plugins/plugins/main/loopback|github.com/containernetworking/plugins|0||"
)

# runc links libseccomp: install its headers from Debian when missing (CI's
# machine is fresh; the build runs as root there).
need_seccomp() {
  pkg-config --exists libseccomp 2>/dev/null && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "tools: runc needs libseccomp-dev (apt-get install libseccomp-dev) and this is not root" >&2; return 1
  fi
  echo "tools: installing libseccomp-dev from Debian for runc ..."
  apt-get update -qq >"$bin/.stamps/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev pkg-config gcc >>"$bin/.stamps/apt.log" 2>&1 ||
    { cat "$bin/.stamps/apt.log" >&2; echo "tools: apt-get install libseccomp-dev failed" >&2; return 1; }
}
only=("$@") # optional: build only these tools

total_start=$(date +%s)
for t in "${tools[@]}"; do
  IFS='|' read -r name dir pkg mod cgo tags ldflags <<<"$t"
  if [ ${#only[@]} -gt 0 ] && [[ ! " ${only[*]} " =~ " $name " ]]; then continue; fi
  moddir="$root/hack/tools/$dir"
  ver=$(awk -v m="$mod" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$moddir/go.mod")
  if [ -z "$ver" ]; then
    echo "tools: $mod has no version in $moddir/go.mod" >&2; exit 1
  fi
  want="$mod@$ver $(go env GOVERSION)"
  # Stamps of tools built with neither cgo, tags nor ldflags keep the old form.
  if [ "$cgo" = 1 ]; then want="$want cgo"; fi
  if [ -n "$tags" ]; then want="$want tags=$tags"; fi
  if [ -n "$ldflags" ]; then want="$want ldflags=$ldflags"; fi
  stamp="$bin/.stamps/$name"
  mkdir -p "$(dirname "$stamp")" "$(dirname "$bin/$name")"
  if [ -x "$bin/$name" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "tools: $name $ver up to date"
    continue
  fi
  echo "tools: building $name $ver ..."
  start=$(date +%s)
  if ! (cd "$moddir" && go mod download) >"$bin/.stamps/$name.log" 2>&1; then
    cat "$bin/.stamps/$name.log" >&2
    echo "tools: cannot download the modules for $name from the Go module proxy ($(go env GOPROXY)); is it reachable?" >&2
    exit 1
  fi
  if [ "$cgo" = 1 ]; then need_seccomp; fi
  if ! (cd "$moddir" && CGO_ENABLED=$cgo go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg") 2>&1 | tee -a "$bin/.stamps/$name.log" >&2; then
    echo "tools: building $name failed (log: $bin/.stamps/$name.log)" >&2; exit 1
  fi
  if [ ! -f "$bin/$name.tmp" ]; then echo "tools: building $name produced no binary" >&2; exit 1; fi
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$want" >"$stamp"
  echo "tools: built $name $ver in $(( $(date +%s) - start ))s"
done
echo "tools: done in $(( $(date +%s) - total_start ))s"
