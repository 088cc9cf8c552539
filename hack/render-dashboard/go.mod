// render-dashboard renders the etcd-agent Grafana dashboard's panels to a PNG
// from a recording of the lab agents' /metrics, with the Go standard library
// only (no Grafana, no plotting library). Its own module: it adds nothing to
// the product's go.mod.
module github.com/etcd-agent/etcd-agent/hack/render-dashboard

go 1.26.0
