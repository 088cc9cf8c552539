#!/usr/bin/env bash
# Builds the real etcd, etcdctl, etcdutl, etcd-3.7, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, promtool and weed (SeaweedFS, the
# lab's S3-compatible store) into bin/
# from the Go module proxy. Each tool has its own module under hack/tools/ (their
# dependency graphs conflict: kubernetes 1.37 wants etcd client 3.7, the lab runs
# etcd 3.6). A stamp per binary records the module version and Go version it was
# built with, so a warm run rebuilds nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/bin"
mkdir -p "$bin/.stamps"
export CGO_ENABLED=0

# tool name | tools module dir | main package | module whose version pins it
tools=(
  "etcd|etcd|go.etcd.io/etcd/server/v3|go.etcd.io/etcd/server/v3"
  "etcdctl|etcd|go.etcd.io/etcd/etcdctl/v3|go.etcd.io/etcd/etcdctl/v3"
  "etcdutl|etcd|go.etcd.io/etcd/etcdutl/v3|go.etcd.io/etcd/etcdutl/v3"
  "etcd-3.7|etcd37|go.etcd.io/etcd/server/v3|go.etcd.io/etcd/server/v3"
  "kube-apiserver|kubernetes|k8s.io/kubernetes/cmd/kube-apiserver|k8s.io/kubernetes"
  "kube-controller-manager|kubernetes|k8s.io/kubernetes/cmd/kube-controller-manager|k8s.io/kubernetes"
  "kube-scheduler|kubernetes|k8s.io/kubernetes/cmd/kube-scheduler|k8s.io/kubernetes"
  "kubectl|kubernetes|k8s.io/kubernetes/cmd/kubectl|k8s.io/kubernetes"
  "promtool|promtool|github.com/prometheus/prometheus/cmd/promtool|github.com/prometheus/prometheus"
  "weed|seaweedfs|github.com/seaweedfs/seaweedfs/weed|github.com/seaweedfs/seaweedfs"
)
only=("$@") # optional: build only these tools

total_start=$(date +%s)
for t in "${tools[@]}"; do
  IFS='|' read -r name dir pkg mod <<<"$t"
  if [ ${#only[@]} -gt 0 ] && [[ ! " ${only[*]} " =~ " $name " ]]; then continue; fi
  moddir="$root/hack/tools/$dir"
  ver=$(awk -v m="$mod" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$moddir/go.mod")
  if [ -z "$ver" ]; then
    echo "tools: $mod has no version in $moddir/go.mod" >&2; exit 1
  fi
  want="$mod@$ver $(go env GOVERSION)"
  stamp="$bin/.stamps/$name"
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
  if ! (cd "$moddir" && go build -trimpath -o "$bin/$name.tmp" "$pkg") 2>&1 | tee -a "$bin/.stamps/$name.log" >&2; then
    echo "tools: building $name failed (log: $bin/.stamps/$name.log)" >&2; exit 1
  fi
  if [ ! -f "$bin/$name.tmp" ]; then echo "tools: building $name produced no binary" >&2; exit 1; fi
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$want" >"$stamp"
  echo "tools: built $name $ver in $(( $(date +%s) - start ))s"
done
echo "tools: done in $(( $(date +%s) - total_start ))s"
