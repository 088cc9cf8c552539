// Package docs holds the repository's documentation. Its Go side embeds
// the runbooks whose marked procedures `etcd-agent status --cluster`
// prints with a cluster's own values: the commands a person runs are the
// ones the e2e tests run (test/e2e/runbook_test.go).
package docs

import _ "embed"

// Runbooks is docs/runbooks/README.md.
//
//go:embed runbooks/README.md
var Runbooks []byte

// RunbooksFile is its path in the repository, for messages.
const RunbooksFile = "docs/runbooks/README.md"

// ManagementNodes is docs/management-nodes.md: its "Majority lost"
// procedures restore a StatefulSet member's cluster.
//
//go:embed management-nodes.md
var ManagementNodes []byte

// ManagementNodesFile is its path in the repository, for messages.
const ManagementNodesFile = "docs/management-nodes.md"
