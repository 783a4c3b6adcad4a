// Package storage is every file kaas writes under data.dir (group files, the offsets
// journal, the topic catalogue, producer ids, the cluster id, partition segments and their
// recovery point, leader-epoch file and leader.lock): the FS interface the
// writers go through, OSFS on the operating system's files, FaultFS to fail any step in
// tests, the modes new files and directories get (data.file.mode), and the durable
// helpers (an atomic write through a tmp file, fsync, rename and an fsync of the
// directory; a durable removal; SyncDir).
//
// Partition segments are RWFiles (FS.OpenFile): positioned reads and writes, truncation
// and fsync, each a step FaultFS and the chaos hook can fail or slow.
package storage
