#!/usr/bin/python3
"""The transactions scenario with confluent-kafka-python (librdkafka), as e2e/clients/saramatxn
does it with sarama: a transactional producer writes transactions over every partition of a
topic, some committed, some aborted; an isolation.level=read_committed consumer must see
exactly the committed records, each once, and a read_uncommitted one every record. Then a
consume-transform-produce step: a group member (read_committed) consumes the committed
records, a transactional producer copies them to a second topic and sends the member's
offsets to the transaction (send_offsets_to_transaction with the member's group metadata),
once aborted and then redone and committed. The group's offsets must not be visible while
the transaction is open nor after the abort, and must be the consumed positions after the
commit (asked with require_stable: librdkafka's committed() at read_committed); the output
topic holds each record once at read_committed, twice at read_uncommitted.
"""

import logging
import os
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition, libversion, version
from confluent_kafka.admin import AdminClient, NewTopic

NAME = "confluent-kafka-python-txn"
PARTITIONS = 3
TXNS = 6  # transactions t with t % 3 == 1 are aborted; the last one is committed
PER_PART = 3  # records per partition per transaction


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
FATAL = []


def on_error(err):
    print("librdkafka error: %s" % err, file=sys.stderr)
    if err.fatal():
        FATAL.append(str(err))


def env():
    g = os.environ.get
    return {
        "brokers": g("E2E_BROKERS", "127.0.0.1:9092"),
        "topic": g("E2E_TOPIC", "e2e-python-txn"),
        "group": g("E2E_GROUP", "e2e-python-txn-group"),
        "timeout": int(g("E2E_TIMEOUT_S") or 60),
    }


def base(e, **extra):
    conf = {"bootstrap.servers": e["brokers"], "client.id": "e2e-python-txn", "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000, "logger": LOG, "error_cb": on_error}
    if os.environ.get("E2E_DEBUG"):
        conf["debug"] = "eos,protocol,broker,cgrp,fetch"
    conf.update(extra)
    return conf


T0 = time.time()


def step(what):
    print("%6.2fs %s" % (time.time() - T0, what), file=sys.stderr, flush=True)


def key(t, p, r):
    return "t%d-p%d-r%d" % (t, p, r)


def last(p):
    return key(TXNS - 1, p, PER_PART - 1)


def aborted(t):
    return t % 3 == 1


def consumer(e, group, isolation, **extra):
    return Consumer(base(e, **{"group.id": group, "isolation.level": isolation, "enable.auto.commit": False,
                               "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, **extra}))


def consume(c, topic, n, deadline, assign=True):
    """Reads every partition of topic until its last record (last(p)) has come n times and
    returns [(partition, offset, key, value)]."""
    if assign:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen = {p: 0 for p in range(PARTITIONS)}
    got = []
    while any(s < n for s in seen.values()):
        if time.time() > deadline:
            raise Fail("%s: %d records read, last records seen %s of %d times" % (topic, len(got), seen, n))
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise Fail("%s: consume: %s" % (topic, m.error()))
        k = m.key().decode()
        got.append((m.partition(), m.offset(), k, m.value().decode()))
        if k == last(m.partition()):
            seen[m.partition()] += 1
    return got


def exactly(got, want, n, what):
    count = {}
    for _, _, k, _ in got:
        count[k] = count.get(k, 0) + 1
    bad = ["%s %d times" % (k, count.get(k, 0)) for k in sorted(want) if count.get(k, 0) != n]
    bad += ["%s (not expected) %d times" % (k, c) for k, c in sorted(count.items()) if k not in want]
    if bad:
        raise Fail("%s: %d records read, want %d each %d times: %s" % (what, len(got), len(want), n, ", ".join(bad[:6])))


def committed(c, topic, timeout):
    tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=timeout)
    out = {}
    for tp in tps:
        if tp.error:
            raise Fail("committed(): partition %d: %s" % (tp.partition, tp.error))
        if tp.offset >= 0:
            out[tp.partition] = tp.offset
    return out


def run(e):
    deadline = time.time() + e["timeout"]
    src, dst, group = e["topic"], e["topic"] + "-out", e["group"]
    admin = AdminClient(base(e))
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (src, dst)], request_timeout=15).values():
        f.result(timeout=20)

    # 1. Transactions over every partition, some aborted.
    p = Producer(base(e, **{"transactional.id": src + "-producer", "linger.ms": 5}))
    p.init_transactions(20)
    committed_keys, aborted_keys = set(), set()
    for t in range(TXNS):
        p.begin_transaction()
        for part in range(PARTITIONS):
            for r in range(PER_PART):
                k = key(t, part, r)
                (aborted_keys if aborted(t) else committed_keys).add(k)
                p.produce(src, key=k, value="abort" if aborted(t) else "commit", partition=part)
        # librdkafka drops the records an abort finds unsent: flush them to the log first,
        # so the abort has records to hide.
        if p.flush(20):
            raise Fail("transaction %d: records left unsent after flush" % t)
        if aborted(t):
            p.abort_transaction(20)
        else:
            p.commit_transaction(20)
    p.flush(5)

    step("transactions written")
    c = consumer(e, group + "-rc", "read_committed")
    rc = consume(c, src, 1, deadline)
    c.close()
    exactly(rc, committed_keys, 1, "read_committed " + src)
    c = consumer(e, group + "-ru", "read_uncommitted")
    ru = consume(c, src, 1, deadline)
    c.close()
    exactly(ru, committed_keys | aborted_keys, 1, "read_uncommitted " + src)

    step("read back at both levels")
    # 2. Consume-transform-produce: a group member's offsets in the transaction.
    member = consumer(e, group, "read_committed")
    member.subscribe([src])
    records = consume(member, src, 1, deadline, assign=False)
    exactly(records, committed_keys, 1, "the group member (read_committed) on " + src)
    step("the group member consumed")
    want = {}
    for part, off, _, _ in records:
        want[part] = max(want.get(part, 0), off + 1)
    positions = [TopicPartition(src, part, off) for part, off in sorted(want.items())]
    # Checkers of the group's offsets that never join it: read_uncommitted (OffsetFetch
    # without require_stable: pending offsets are hidden) and read_committed (require_stable:
    # librdkafka asks again while the broker answers UNSTABLE_OFFSET_COMMIT).
    loose = consumer(e, group, "read_uncommitted")
    stable = consumer(e, group, "read_committed")
    ctp = Producer(base(e, **{"transactional.id": src + "-ctp", "linger.ms": 5}))
    ctp.init_transactions(20)
    for commit in (False, True):
        ctp.begin_transaction()
        for part, _, k, v in records:
            ctp.produce(dst, key=k, value="copy-" + v, partition=part)
        ctp.send_offsets_to_transaction(positions, member.consumer_group_metadata(), 20)
        if ctp.flush(20):
            raise Fail("copy: records left unsent after flush")
        got = committed(loose, src, 10)
        if got:
            raise Fail("the group's offsets are %s while the transaction is open, want none" % got)
        if commit:
            ctp.commit_transaction(20)
        else:
            ctp.abort_transaction(20)
        got = committed(stable, src, 20)
        if got != (want if commit else {}):
            raise Fail("the group's offsets after the %s are %s, want %s" % ("commit" if commit else "abort", got, want if commit else "none"))
    step("copied, aborted then committed")
    ctp.flush(5)
    for x in (member, loose, stable):
        x.close()

    c = consumer(e, group + "-out-rc", "read_committed")
    oc = consume(c, dst, 1, deadline)
    c.close()
    exactly(oc, committed_keys, 1, "read_committed " + dst)
    c = consumer(e, group + "-out-ru", "read_uncommitted")
    ou = consume(c, dst, 2, deadline)
    c.close()
    exactly(ou, committed_keys, 2, "read_uncommitted " + dst)

    step("the copies read back")
    if FATAL:
        raise Fail("librdkafka fatal errors: %s" % "; ".join(FATAL[:2]))
    if PROTOCOL_ERRORS.seen:
        raise Fail("librdkafka protocol errors (%d), first: %s" % (len(PROTOCOL_ERRORS.seen), " ".join(PROTOCOL_ERRORS.seen[:2])))
    return ("%d transactions over %d partitions (%d aborted): read_committed saw the %d committed records once each, "
            "read_uncommitted all %d; consume-transform-produce with send_offsets_to_transaction from a group member, aborted "
            "then committed: the group's offsets %s only after the commit, read_committed output each record once, "
            "read_uncommitted twice") % (TXNS, PARTITIONS, sum(aborted(t) for t in range(TXNS)), len(committed_keys),
                                         len(committed_keys) + len(aborted_keys), dict(sorted(want.items())))


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
