// Package storage is the file access of kaas's writers under data.dir: the FS interface
// they go through, OSFS on the operating system's files, FaultFS to fail any step in
// tests, the hook by which the chaos suite fails or slows OSFS's write-side steps
// (SetHook), the modes new files and directories get (data.file.mode), and the durable
// helpers (an atomic write through a tmp file, fsync, rename and an fsync of the
// directory; a durable removal; SyncDir).
//
// Through FS go the group files, the offsets journal, the topic catalogue and producer
// ids, the rewrites of a partition's leader-epoch file, the cluster id and size, the
// published cluster views, the fence's lease records and the users and ACL files (the
// lock files that the fence and the auth files flock are opened with os).
//
// Not through FS yet (planned): a partition's data files. Its segments are created,
// appended, read, moved aside and removed with package os, on the produce and fetch
// paths, and only their fsync goes through FS.SyncFile, so that FaultFS can fail it;
// leader.lock, recovery-point, the accepted-loss record and the reads of
// leader-epochs.json use os as well. FaultFS and the chaos suite's storage faults do
// not reach those steps.
package storage
