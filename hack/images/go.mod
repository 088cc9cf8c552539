// images writes the real lab node's container images (docs/plans/real-node.md
// section 2) with go-containerregistry. Its own module: go-containerregistry
// never reaches the product's go.mod.
module github.com/etcd-agent/etcd-agent/hack/images

go 1.26.7

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
)
