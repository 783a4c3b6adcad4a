package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	gometrics "github.com/rcrowley/go-metrics"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker/brokertest"
)

// TestClientsCompressedProducePasses: what sarama, kafka-go and franz-go send with each
// codec passes produce validation, and franz-go reads every record back.
func TestClientsCompressedProducePasses(t *testing.T) {
	// sarama's meters would start go-metrics' package-wide ticker goroutine, which never
	// ends; nil meters start none.
	gometrics.UseNilMetrics = true
	b := brokertest.Start(t, nil)
	const n = 20
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	values := func(prefix string) []string {
		v := make([]string, n)
		for i := range v {
			v[i] = fmt.Sprintf("%s value %d, some text that compresses, some text that compresses", prefix, i)
		}
		return v
	}
	codecs := []struct {
		name   string
		sarama sarama.CompressionCodec
		kgo    kafkago.Compression
		franz  kgo.CompressionCodec
	}{
		{"none", sarama.CompressionNone, 0, kgo.NoCompression()},
		{"gzip", sarama.CompressionGZIP, kafkago.Gzip, kgo.GzipCompression()},
		{"snappy", sarama.CompressionSnappy, kafkago.Snappy, kgo.SnappyCompression()},
		{"lz4", sarama.CompressionLZ4, kafkago.Lz4, kgo.Lz4Compression()},
		{"zstd", sarama.CompressionZSTD, kafkago.Zstd, kgo.ZstdCompression()},
	}
	want := map[string]int{}
	for _, c := range codecs {
		topic := "clients-" + c.name
		createTopic(t, b.Addr(), topic, 1)

		sc := sarama.NewConfig()
		sc.Version = sarama.V3_0_0_0
		sc.Producer.Return.Successes = true
		sc.Producer.RequiredAcks = sarama.WaitForAll
		sc.Producer.Compression = c.sarama
		sc.Producer.Flush.Messages = n
		sp, err := sarama.NewSyncProducer([]string{b.Addr()}, sc)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []*sarama.ProducerMessage
		for _, v := range values("sarama") {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder(v),
				Headers: []sarama.RecordHeader{{Key: []byte("h"), Value: []byte("v")}}})
		}
		if err := sp.SendMessages(msgs); err != nil {
			t.Errorf("sarama %s: %v", c.name, err)
		}
		sp.Close()

		// A transport of its own: the shared one caches metadata from before the topic.
		tr := &kafkago.Transport{}
		w := &kafkago.Writer{Addr: kafkago.TCP(b.Addr()), Topic: topic, Compression: c.kgo, Transport: tr,
			RequiredAcks: kafkago.RequireAll, BatchSize: n, BatchTimeout: 10 * time.Millisecond}
		var kmsgs []kafkago.Message
		for _, v := range values("kafka-go") {
			kmsgs = append(kmsgs, kafkago.Message{Key: []byte("k"), Value: []byte(v)})
		}
		if err := w.WriteMessages(ctx, kmsgs...); err != nil {
			t.Errorf("kafka-go %s: %v", c.name, err)
		}
		w.Close()
		tr.CloseIdleConnections()

		fc, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(c.franz))
		if err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for _, v := range values("franz-go") {
			recs = append(recs, &kgo.Record{Value: []byte(v)})
		}
		if err := fc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Errorf("franz-go %s: %v", c.name, err)
		}
		fc.Close()
		want[topic] = 3 * n
	}
	if t.Failed() {
		return
	}
	var topics []string
	for topic := range want {
		topics = append(topics, topic)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := map[string]int{}
	total := 0
	for total < 3*n*len(codecs) && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) {
			if ctx.Err() == nil {
				t.Fatalf("fetch %s/%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { got[r.Topic]++; total++ })
	}
	for topic, n := range want {
		if got[topic] != n {
			t.Errorf("%s: read %d records, want %d", topic, got[topic], n)
		}
	}
}
