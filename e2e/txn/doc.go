// Package txn runs exactly-once pipelines against a real kaas process: franz-go's
// GroupTransactSession consuming, transforming and producing in transactions, checked
// record by record at read_committed and read_uncommitted. -txn.broker=fake runs the
// same scenarios against franz-go's kfake, the reference.
package txn
