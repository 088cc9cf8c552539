package gate

import "testing"

// A dedicated --wal-dir on the etcd command line the gate wraps is the WAL
// dir it guards (the data dir check looks there, not in member/wal).
func TestTheGateGuardsTheDedicatedWALDirItsEtcdIsGiven(t *testing.T) {
	argv := []string{"etcd", "--name=cp-1", "--data-dir=/var/lib/etcd", "--wal-dir=/var/lib/etcd-wal/wal",
		"--advertise-client-urls=https://10.0.0.11:2379", "--initial-advertise-peer-urls=https://10.0.0.11:2380"}
	id, _, err := identity(Config{}, argv)
	if err != nil {
		t.Fatal(err)
	}
	if id.WALDir != "/var/lib/etcd-wal/wal" {
		t.Fatalf("the gate guards WAL dir %q, want /var/lib/etcd-wal/wal", id.WALDir)
	}
}
