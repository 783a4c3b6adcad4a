// Package storage is every file kaas writes under data.dir (group files, the offsets
// journal, the topic catalogue, producer ids, the cluster id): the FS interface the
// writers go through, OSFS on the operating system's files, FaultFS to fail any step in
// tests, the modes new files and directories get (data.file.mode), and the durable
// helpers (an atomic write through a tmp file, fsync, rename and an fsync of the
// directory; a durable removal; SyncDir).
//
// Partition segments are opened and appended outside FS, on the produce path, but their
// fsync goes through FS.SyncFile so that FaultFS can fail it too.
package storage
