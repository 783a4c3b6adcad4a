package partition

import "kaas/internal/bufpool"

// The buffers a fetch's reads fill (readPlan.run) come from internal/bufpool's pools by
// size. The connection gives a buffer back once its bytes are copied into the
// response's frame.

// ReadBuffer is a pooled buffer a Fetched's Records lie in.
type ReadBuffer = bufpool.Buffer

// readBuf is a buffer of n bytes, pooled when n is in the pools' range (buf nil
// otherwise).
func readBuf(n int64) ([]byte, *ReadBuffer) { return bufpool.Get(n) }
