// Builds gofail (etcd's failpoint tool): labtest.BuildAgent enables the
// agent's `// gofail:` test hooks with it in the agent the tests run; the
// product binary is built without (docs/design.md, "Test hooks").
module github.com/etcd-agent/etcd-agent/hack/tools/gofail

go 1.26.7

tool go.etcd.io/gofail

require (
	go.etcd.io/gofail v0.2.0 // indirect
)
