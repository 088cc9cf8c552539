// Package extract reads Kubernetes objects straight out of an etcd data dir
// or an `etcdctl snapshot save` file, for when no API server is left to ask.
//
// It never writes or locks the source. A running etcd holds an exclusive
// flock on member/snap/db, and even a shared flock of ours would stop an etcd
// that starts meanwhile, so a data dir's db is copied with plain reads into a
// private temp dir and only the copy is opened with bbolt. A copy taken while
// etcd commits can be torn; bbolt's consistency check on the copy tells, and
// the copy is taken again (a bounded number of times).
//
// bbolt's check runs in a goroutine of its own and panics there on some kinds
// of damage, where no recover can reach; so it runs in a child process (a
// re-exec of this binary, see dbcheck.go) and a crash there is a verdict.
//
// etcd's MVCC layout is decoded with etcd's own helpers where it exports them
// (bucket names, revision keys, mvccpb.KeyValue); values are decoded with
// client-go's scheme (protobuf and JSON), custom resources as unstructured.
// Values encrypted at rest are reported as such; decrypting them needs a
// Decrypter (see Options), which this build does not provide.
package extract
