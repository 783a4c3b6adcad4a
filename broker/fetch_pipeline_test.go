package broker_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
)

// Fetches pipelined on one connection, each answered from a buffer of the read pool,
// get their own records: a buffer goes back to the pool only once the response holding
// it is written, so the reads served while the earlier answers wait for the client (it
// reads none until it has sent every request) never write into them.
func TestPipelinedFetchesKeepTheirRecords(t *testing.T) {
	const (
		batches = 64
		perBat  = 40
	)
	b := brokertest.Start(t, nil)
	createTopic(t, b.Addr(), "pipe", 1)
	c := brokertest.Dial(t, b.Addr())
	value := func(batch, rec int) string {
		return fmt.Sprintf("b%03d-r%02d-", batch, rec) + strings.Repeat(string(rune('a'+batch%26)), 1000)
	}
	for i := range batches {
		vals := make([]string, perBat)
		for r := range vals {
			vals[r] = value(i, r)
		}
		if p := produceCode(t, c, produceReq("pipe", 0, -1, rawBatch(-1, -1, -1, vals...))); p.ErrorCode != 0 {
			t.Fatalf("produce batch %d: %+v", i, p)
		}
	}
	var reqs []byte
	for i := range batches {
		req := fetchReq(11, "pipe", [16]byte{}, 0, int64(i*perBat), 0)
		req.MaxBytes, req.Topics[0].Partitions[0].PartitionMaxBytes = 1, 1 // the first batch, whole (KIP-74)
		reqs = append(reqs, c.Encode(req, int32(100+i))...)
	}
	c.Write(reqs)
	for i := range batches {
		var resp kmsg.FetchResponse
		resp.Version = 11
		if corr := c.Recv(&resp); corr != int32(100+i) {
			t.Fatalf("response %d: correlation id %d", i, corr)
		}
		p := resp.Topics[0].Partitions[0]
		recs := p.RecordBatches
		if p.ErrorCode != 0 || len(recs) < 61 {
			t.Fatalf("fetch %d: error %d, %d bytes", i, p.ErrorCode, len(recs))
		}
		size := 12 + int(binary.BigEndian.Uint32(recs[8:]))
		if base := int64(binary.BigEndian.Uint64(recs)); base != int64(i*perBat) || size != len(recs) {
			t.Fatalf("fetch %d: batch at offset %d of %d bytes, in %d bytes; want offset %d", i, base, size, len(recs), i*perBat)
		}
		if crc := crc32.Checksum(recs[21:], castagnoli); crc != binary.BigEndian.Uint32(recs[17:]) {
			t.Fatalf("fetch %d: batch CRC %08x does not match its bytes (%08x)", i, binary.BigEndian.Uint32(recs[17:]), crc)
		}
		for r := range perBat {
			if !bytes.Contains(recs, []byte(value(i, r))) {
				t.Fatalf("fetch %d: record %d is not the one produced", i, r)
			}
		}
	}
}
