#!/usr/bin/python3
"""The admin scenario with confluent-kafka-python's AdminClient (librdkafka), as
e2e/clients/saramaadmin does it with sarama: create a compacted topic with configs, describe
its configs (values and sources), alter them with alter_configs (1.7.0 has no
incremental_alter_configs: the legacy call replaces the topic's whole set, so a config left
out goes back to its default), describe the cluster (list_topics: brokers, controller, cluster
id; 1.7.0 has no describe_cluster), delete the records below an offset (1.7.0 has no
delete_records: the Go helper e2e/clients/check sends DeleteRecords), then the low watermark
(get_watermark_offsets) and a consumer from the beginning must begin there, delete the topic.
1.7.0 has no describe_log_dirs.
"""

import logging
import os
import subprocess
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition, libversion, version
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

NAME = "confluent-kafka-python-admin"
RECORDS = 20  # to partition 0: keys k0..k9, each twice
CUT = 10  # DeleteRecords before this offset of partition 0


class Fail(Exception):
    pass


class ProtocolErrors(logging.Handler):
    """Keeps librdkafka's protocol errors (e2e/python/confluent.py): any is a FAIL."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def emit(self, record):
        msg = record.getMessage()
        print("librdkafka: " + msg, file=sys.stderr)
        if "PROTOERR" in msg or "Protocol parse failure" in msg:
            self.seen.append(msg)


PROTOCOL_ERRORS = ProtocolErrors()
LOG = logging.getLogger("librdkafka")
LOG.addHandler(PROTOCOL_ERRORS)
LOG.setLevel(logging.INFO)
LOG.propagate = False


def env():
    g = os.environ.get
    return {
        "brokers": g("E2E_BROKERS", "127.0.0.1:9092"),
        "topic": g("E2E_TOPIC", "e2e-python-admin"),
        "group": g("E2E_GROUP", "e2e-python-admin-group"),
        "timeout": int(g("E2E_TIMEOUT_S") or 60),
        "bin": g("E2E_BIN", ""),
    }


def base(e, **extra):
    conf = {"bootstrap.servers": e["brokers"], "client.id": "e2e-python-admin", "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000, "logger": LOG}
    if os.environ.get("E2E_DEBUG"):
        conf["debug"] = "admin,protocol,broker,fetch"
    conf.update(extra)
    return conf


def describe(admin, topic):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res], request_timeout=20)[res].result(20)


def want(cfgs, name, value, *sources):
    e = cfgs.get(name)
    if e is None:
        return "%s not described" % name
    if value is not None and e.value != value:
        return "%s = %s, want %s" % (name, e.value, value)
    if ConfigSource(e.source) not in sources:
        return "%s (%s) source %s, want %s" % (name, e.value, ConfigSource(e.source).name, " or ".join(s.name for s in sources))
    return ""


def check(what, *problems):
    p = [x for x in problems if x]
    if p:
        raise Fail("%s: %s" % (what, "; ".join(p)))


def go_helper(e, *args):
    r = subprocess.run([os.path.join(e["bin"], "check")] + list(args), capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, E2E_TOPIC=e["topic"]))
    if r.returncode != 0:
        raise Fail(r.stdout.strip() or r.stderr.strip())
    return r.stdout.strip()


def run(e):
    deadline = time.time() + e["timeout"]
    topic = e["topic"]
    steps = []
    admin = AdminClient(base(e))
    topic_cfg, default, static = ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DEFAULT_CONFIG, ConfigSource.STATIC_BROKER_CONFIG

    # 1. A compacted topic with configs.
    nt = NewTopic(topic, 2, 1, config={"cleanup.policy": "compact", "retention.ms": "3600000", "max.message.bytes": "200000"})
    admin.create_topics([nt], request_timeout=20)[topic].result(20)
    cfgs = describe(admin, topic)
    check("after create",
          want(cfgs, "cleanup.policy", "compact", topic_cfg),
          want(cfgs, "retention.ms", "3600000", topic_cfg),
          want(cfgs, "max.message.bytes", "200000", topic_cfg),
          want(cfgs, "segment.bytes", None, default, static))
    steps.append("created compacted, %d configs described (set ones from the topic, segment.bytes from %s)" % (
        len(cfgs), ConfigSource(cfgs["segment.bytes"].source).name))

    # 2. alter_configs (legacy): the whole set replaced, max.message.bytes left out.
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"cleanup.policy": "compact", "retention.ms": "7200000"})
    admin.alter_configs([res], request_timeout=20)[res].result(20)
    cfgs = describe(admin, topic)
    check("after alter_configs",
          want(cfgs, "cleanup.policy", "compact", topic_cfg),
          want(cfgs, "retention.ms", "7200000", topic_cfg),
          want(cfgs, "max.message.bytes", None, default, static))
    steps.append("alter_configs replaced the set (retention.ms 7200000, max.message.bytes back to %s from %s)" % (
        cfgs["max.message.bytes"].value, ConfigSource(cfgs["max.message.bytes"].source).name))

    # 3. The cluster, from list_topics (Metadata).
    md = admin.list_topics(timeout=20)
    addrs = ["%s:%d" % (b.host, b.port) for b in md.brokers.values()]
    if md.controller_id not in md.brokers or e["brokers"].split(",")[0] not in addrs or not md.cluster_id:
        raise Fail("cluster: brokers %s, controller %d, cluster id %r: want the controller among the brokers, %s listed, a cluster id" % (
            addrs, md.controller_id, md.cluster_id, e["brokers"]))
    steps.append("list_topics: %d broker(s), controller %d, cluster id %s" % (len(md.brokers), md.controller_id, md.cluster_id))

    # 4. Records, DeleteRecords (Go helper), the low watermark and a consumer from the beginning.
    p = Producer(base(e, **{"acks": "all", "linger.ms": 5}))
    for i in range(RECORDS):
        p.produce(topic, key="k%d" % (i % 10), value="v%d" % i, partition=0)
    if p.flush(20):
        raise Fail("records left unsent after flush")
    low = go_helper(e, "delete-records", "0", str(CUT))
    if low != str(CUT):
        raise Fail("DeleteRecords before %d answered low watermark %s" % (CUT, low))
    c = Consumer(base(e, **{"group.id": e["group"], "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "fetch.wait.max.ms": 100}))
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=20, cached=False)
        if (lo, hi) != (CUT, RECORDS):
            raise Fail("partition 0's watermarks after DeleteRecords(%d): low %d, high %d, want %d, %d" % (CUT, lo, hi, CUT, RECORDS))
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        first = None
        while first is None and time.time() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise Fail("consume from the beginning: %s" % m.error())
            first = m
        if first is None:
            raise Fail("no record from the beginning of partition 0")
        if (first.offset(), first.key(), first.value()) != (CUT, b"k%d" % (CUT % 10), b"v%d" % CUT):
            raise Fail("a consumer from the beginning began at %d (%s=%s), want %d" % (first.offset(), first.key(), first.value(), CUT))
    finally:
        c.close()
    steps.append("DeleteRecords before %d (Go helper): low watermark %d, a consumer from the beginning begins there" % (CUT, lo))

    # 5. delete_topics.
    admin.delete_topics([topic], request_timeout=20)[topic].result(20)
    while topic in admin.list_topics(timeout=20).topics:
        if time.time() > deadline:
            raise Fail("%s still listed after its deletion" % topic)
        time.sleep(0.1)
    steps.append("topic deleted; no delete_records, describe_cluster, describe_log_dirs or incremental_alter_configs in 1.7.0")
    if PROTOCOL_ERRORS.seen:
        raise Fail("librdkafka protocol errors (%d), first: %s" % (len(PROTOCOL_ERRORS.seen), " ".join(PROTOCOL_ERRORS.seen[:2])))
    return "; ".join(steps)


def main():
    e = env()
    start = time.time()
    name = "%s (%s, librdkafka %s)" % (NAME, version()[0], libversion()[0])
    try:
        summary = run(e)
    except Exception as err:  # noqa: BLE001 - every failure is one FAIL line
        more = "; librdkafka protocol errors: %s" % PROTOCOL_ERRORS.seen[0] if PROTOCOL_ERRORS.seen else ""
        print("FAIL %s: %s%s (after %.1fs)" % (name, err, more, time.time() - start), flush=True)
        os._exit(1)
    print("PASS %s: %s (%.1fs)" % (name, summary, time.time() - start), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
