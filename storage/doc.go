// Package storage is the file access of kaas's writers under data.dir: the FS interface
// they go through, OSFS on the operating system's files, FaultFS to fail any step in
// tests, the hook by which the chaos suite fails or slows OSFS's write-side steps and
// positioned reads (SetHook), the modes new files and directories get (data.file.mode),
// and the durable helpers (an atomic write through a tmp file, fsync, rename and an fsync
// of the directory; a durable removal; SyncDir).
//
// Through FS go the group files, the offsets journal, the topic catalogue and producer
// ids, the cluster id and size, the published cluster views, the fence's lease records,
// the users and ACL files, and every file of a partition: its segments are RWFiles
// (FS.OpenFile: positioned reads and writes, truncation and fsync), its recovery point,
// accepted-loss record and leader-epoch file are read and written through FS, and its
// leader.lock is taken with FS.Lock. FaultFS and the chaos hook can fail or slow each
// of those steps.
//
// Not through FS yet (planned): the other lock files, which the data dir, the fence and
// the auth files flock shared or with a wait that FS.Lock does not offer, are opened with
// os.
package storage
