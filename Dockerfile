# etcd-agent: one static binary on a minimal base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY internal ./internal
COPY metrics ./metrics
COPY docs ./docs
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/etcd-agent/etcd-agent/internal/version.Version=${VERSION}" \
    -o /out/etcd-agent ./cmd/etcd-agent

# distroless/static: no shell, no package manager, CA certificates included.
# The agent runs as root (uid 0) on purpose: it renames the etcd data dir and
# moves the etcd static-pod manifest, both root-owned hostPaths on kubeadm and
# OpenShift nodes. The DaemonSet drops every capability it does not need.
FROM gcr.io/distroless/static-debian12:latest
COPY --from=build /out/etcd-agent /usr/local/bin/etcd-agent
USER 0:0
EXPOSE 9793
ENTRYPOINT ["/usr/local/bin/etcd-agent"]
CMD ["run"]
