#!/usr/bin/python3
"""The e2e scenario with confluent-kafka-python (librdkafka), step for step the one of
e2e/scenario (Go): produce, consume in a group of three through a leave, a join and a
broker restart, check nothing was lost and the commits reached the log end, then
administer the empty group to its deletion.

Members store a record's offset only after the tracker took it (enable.auto.offset.store
off) and auto-commit the stored offsets. A member held at the gate pauses the partition and
seeks back to the record it holds, so it neither loses nor skips it. Debian's package is
confluent-kafka 1.7.0, whose AdminClient has list_groups (ListGroups + DescribeGroups) but
no offset or group deletion: those two steps go through the Go helper e2e/clients/check.

E2E_GROUP_PROTOCOL=consumer runs the members on the consumer group protocol (KIP-848,
group.protocol=consumer, the broker's uniform assignor, incremental assign and unassign).
librdkafka has it from 2.4; Debian's is 2.0.2, so run.sh loads the librdkafka 2.12 that
node-rdkafka 3.6.1 of e2e/js848 builds (LD_LIBRARY_PATH; librdkafka keeps its ABI within
.so.1, and the binding passes the settings through). The Go helper waits on the group and
administers it with ConsumerGroupDescribe, which answers GROUP_ID_NOT_FOUND for a classic
group, so a member that fell back to the classic protocol cannot pass.
"""

import logging
import os
import struct
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition, libversion, version
from confluent_kafka.admin import AdminClient, NewTopic

NAME = "confluent-kafka-python"
CONSUMER_PROTOCOL = os.environ.get("E2E_GROUP_PROTOCOL") == "consumer"


class Fail(Exception):
    pass


def env():
    g = os.environ.get
    return {
        "brokers": g("E2E_BROKERS", "127.0.0.1:9092"),
        "topic": g("E2E_TOPIC", "e2e-python"),
        "group": g("E2E_GROUP", "e2e-python-group"),
        "records": int(g("E2E_RECORDS") or 10000),
        "partitions": int(g("E2E_PARTITIONS") or 6),
        "restart": g("E2E_RESTART", ""),
        "timeout": int(g("E2E_TIMEOUT_S") or 100),
        "bin": g("E2E_BIN", ""),
    }


def key(i):
    return "k-%05d" % i


def value(i):
    return "v-%05d" % i


def show(m):
    return "map[" + " ".join("%d:%d" % (p, o) for p, o in sorted(m.items())) + "]"


class Tracker:
    """Every consumed record, the gate that paces the members, the final proof."""

    def __init__(self, records, end):
        self.records, self.end = records, end
        self.lock = threading.Lock()
        self.gate = 0
        self.at = {}  # (partition, offset) -> index
        self.index = [None] * records
        self.unique = self.total = 0
        self.members = {}
        self.err = None

    def open(self, gate):
        with self.lock:
            self.gate = gate

    def admitted(self):
        with self.lock:
            return self.unique < self.gate

    def consumed(self, member, partition, offset, k, v):
        ks = (k or b"").decode(errors="replace")
        vs = (v or b"").decode(errors="replace")
        pos = (partition, offset)
        with self.lock:
            err = None
            try:
                i = int(vs[2:])
            except ValueError:
                i = None
            if not vs.startswith("v-") or ks != "k-" + vs[2:] or i is None:
                err = "record key %r does not match value %r" % (ks, vs)
            elif not 0 <= i < self.records:
                err = "record index %d out of range" % i
            elif pos in self.at and self.at[pos] != i:
                err = "partition %d offset %d gave record %d, earlier record %d" % (partition, offset, i, self.at[pos])
            elif self.index[i] is not None and self.index[i] != pos:
                err = "record %d at %s, earlier at %s (produced twice?)" % (i, pos, self.index[i])
            if err:
                self.err = self.err or "member %s: %s" % (member, err)
                return
            self.total += 1
            self.members[member] = self.members.get(member, 0) + 1
            if self.index[i] is None:
                self.index[i] = pos
                self.at[pos] = i
                self.unique += 1

    def wait(self, n, deadline):
        while True:
            with self.lock:
                if self.err:
                    raise Fail(self.err)
                if self.unique >= n:
                    return
            if time.time() > deadline:
                raise Fail("waiting for %d distinct records: only %d consumed (%s)" % (n, self.unique, self.stats()))
            time.sleep(0.01)

    def frontier(self):
        with self.lock:
            f = {}
            for p, end in self.end.items():
                o = 0
                while o < end and (p, o) in self.at:
                    o += 1
                f[p] = o
            return f

    def check(self):
        with self.lock:
            if self.err:
                raise Fail(self.err)
            missing = ["%d/%d" % (p, o) for p, end in sorted(self.end.items()) for o in range(end) if (p, o) not in self.at]
            if missing:
                raise Fail("%d records never consumed (partition/offset: %s)" % (len(missing), " ".join(missing[:10])))
            if self.unique != self.records:
                raise Fail("%d distinct records consumed, want %d" % (self.unique, self.records))

    def stats(self):
        per = " ".join("%s=%d" % (m, n) for m, n in sorted(self.members.items()))
        return "%d distinct, %d duplicates, by member %s" % (self.unique, self.total - self.unique, per)


class ProtocolErrors(logging.Handler):
    """Keeps librdkafka's protocol errors: it logs a response it cannot parse and carries on
    with what it parsed before it, so the scenario can pass around one; any is a FAIL."""

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


def base(e, **extra):
    conf = {"bootstrap.servers": e["brokers"], "client.id": "e2e-python", "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000, "logger": LOG}
    conf.update(extra)
    return conf


class Member:
    """One group member polling in its own thread (librdkafka calls stay on that thread)."""

    def __init__(self, e, ident, tracker):
        self.name = "python-%d" % ident
        self.t = tracker
        self.held = {}  # partition -> TopicPartition at the held record
        self.stop = threading.Event()
        conf = {
            "group.id": e["group"], "client.id": self.name, "auto.offset.reset": "earliest",
            "enable.auto.commit": True, "enable.auto.offset.store": False, "auto.commit.interval.ms": 300,
        }
        if CONSUMER_PROTOCOL:
            # The consumer protocol takes the session timeout and heartbeat interval from
            # the broker: librdkafka refuses them (and partition.assignment.strategy) there.
            conf.update({"group.protocol": "consumer", "group.remote.assignor": "uniform"})
        else:
            conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
        self.c = Consumer(base(e, **conf))
        self.c.subscribe([e["topic"]], on_assign=self._assigned, on_revoke=self._revoked)
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _revoked(self, consumer, partitions):
        # librdkafka keeps a partition's pause across a rebalance: resume what this member
        # held, or a partition assigned back to it would stay stopped.
        held = [self.held.pop(tp.partition) for tp in partitions if tp.partition in self.held]
        if held:
            consumer.resume(held)
        if CONSUMER_PROTOCOL:
            # Incremental: only the partitions that move are revoked; with
            # enable.auto.commit, the unassign commits their stored offsets.
            consumer.incremental_unassign(partitions)

    def _assigned(self, consumer, partitions):
        if CONSUMER_PROTOCOL:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        consumer.resume(partitions)

    def _poll(self):
        while not self.stop.is_set():
            if self.held and self.t.admitted():
                self.c.resume(list(self.held.values()))
                self.held.clear()
            msg = self.c.poll(0.05)
            if msg is None:
                continue
            if msg.error():
                print("%s: %s" % (self.name, msg.error()), file=sys.stderr)
                continue
            if not self.t.admitted():
                # Held at the gate: stop the partition and rewind to this record, which
                # has not been taken (nor its offset stored).
                tp = TopicPartition(msg.topic(), msg.partition(), msg.offset())
                try:
                    self.c.pause([tp])
                    self.c.seek(tp)
                    self.held[msg.partition()] = tp
                except Exception as err:  # noqa: BLE001 - logged; the record is re-read later
                    print("%s: hold %s: %s" % (self.name, tp, err), file=sys.stderr)
                continue
            self.t.consumed(self.name, msg.partition(), msg.offset(), msg.key(), msg.value())
            self.c.store_offsets(message=msg)

    def close(self):
        """Stop polling, commit the stored offsets, leave the group."""
        self.stop.set()
        self.thread.join(15)
        self.c.close()


class Client:
    def __init__(self, e):
        self.e = e
        self.admin = AdminClient(base(e))
        # Not subscribed: used for watermarks, OffsetFetch and the simple (generation -1)
        # OffsetCommit of a reset; it never joins the group.
        self.tool = Consumer(base(e, **{"group.id": e["group"], "enable.auto.commit": False}))
        self.partitions = []

    def close(self):
        self.tool.close()

    def create_topic(self):
        fs = self.admin.create_topics([NewTopic(self.e["topic"], self.e["partitions"], 1)], request_timeout=15)
        for f in fs.values():
            f.result(timeout=20)

    def produce(self, n):
        p = Producer(base(self.e, **{"acks": "all", "enable.idempotence": True, "linger.ms": 5, "retry.backoff.ms": 100}))
        errors = []

        def delivered(err, msg):
            if err is not None:
                errors.append(err)

        for i in range(n):
            while True:
                try:
                    p.produce(self.e["topic"], key=key(i), value=value(i), on_delivery=delivered)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
        left = p.flush(30)
        if left or errors:
            raise Fail("%d records not acknowledged, %d failed (first: %s)" % (left, len(errors), errors[:1]))

    def end_offsets(self):
        md = self.tool.list_topics(self.e["topic"], timeout=10)
        self.partitions = sorted(md.topics[self.e["topic"]].partitions)
        return {p: self.tool.get_watermark_offsets(TopicPartition(self.e["topic"], p), timeout=10)[1] for p in self.partitions}

    def list_groups(self):
        return {g.id: g.state for g in self.admin.list_groups(timeout=10)}

    def describe_group(self, group):
        gs = self.admin.list_groups(group=group, timeout=10)
        if not gs:
            # librdkafka lists the groups first and describes only the listed ones: a group
            # that does not exist is not returned at all.
            return {"state": "Dead", "protocol": "", "members": 0, "assigned": 0}
        if len(gs) != 1:
            raise Fail("DescribeGroups returned %d groups" % len(gs))
        g = gs[0]
        if g.error is not None:
            raise Fail("DescribeGroups: %s" % g.error)
        return {"state": g.state, "protocol": g.protocol, "members": len(g.members),
                "assigned": sum(1 for m in g.members if assigned(m.assignment))}

    def fetch_offsets(self, group):
        tps = self.tool.committed([TopicPartition(self.e["topic"], p) for p in self.partitions], timeout=10)
        out = {}
        for tp in tps:
            if tp.error is not None:
                raise Fail("OffsetFetch partition %d: %s" % (tp.partition, tp.error))
            if tp.offset >= 0:
                out[tp.partition] = tp.offset
        return out

    def commit_offsets(self, offsets):
        res = self.tool.commit(offsets=[TopicPartition(self.e["topic"], p, o) for p, o in offsets.items()], asynchronous=False)
        for tp in res or []:
            if tp.error is not None:
                raise Fail("OffsetCommit partition %d: %s" % (tp.partition, tp.error))

    def go_helper(self, *args):
        r = subprocess.run([os.path.join(self.e["bin"], "check")] + list(args), capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise Fail(r.stdout.strip() or r.stderr.strip())
        return r.stdout.strip()


def assigned(assignment):
    """Whether a ConsumerProtocolAssignment (version, [topic, [partition]]) holds a partition."""
    try:
        (n,) = struct.unpack_from(">i", assignment, 2)
        off = 6
        for _ in range(n):
            (ln,) = struct.unpack_from(">h", assignment, off)
            off += 2 + ln
            (parts,) = struct.unpack_from(">i", assignment, off)
            off += 4 + 4 * parts
            if parts > 0:
                return True
    except (struct.error, TypeError):
        pass
    return False


def retry(deadline, fn):
    while True:
        try:
            return fn()
        except Exception:  # noqa: BLE001 - retried until the deadline, then raised
            if time.time() > deadline:
                raise
            time.sleep(0.1)


def wait_group(c, e, state, members, deadline):
    if CONSUMER_PROTOCOL:
        # DescribeGroups does not show a consumer-protocol member's assignment: the Go
        # helper watches the group with ConsumerGroupDescribe.
        c.go_helper("wait-group", state, str(members))
        return
    last, err = None, None
    while True:
        try:
            last, err = c.describe_group(e["group"]), None
            if last["state"] == state and last["members"] == members and last["assigned"] == members:
                return
        except Exception as ex:  # noqa: BLE001 - reported at the deadline
            err = ex
        if time.time() > deadline:
            if err:
                raise Fail("describe group %s: %s" % (e["group"], err))
            raise Fail("describe group %s: state %s with %d members (%d assigned), want %s with %d, all assigned"
                       % (e["group"], last["state"], last["members"], last["assigned"], state, members))
        time.sleep(0.1)


def settle(c, e, t):
    deadline = time.time() + 3
    frontier = t.frontier()
    while True:
        try:
            committed = c.fetch_offsets(e["group"])
            if all(committed.get(p, 0) >= o for p, o in frontier.items()):
                return
        except Exception:  # noqa: BLE001 - only a pause before the next event
            committed = {}
        if time.time() > deadline:
            print("e2e: %s; consumed up to %s, committed only %s" % (t.stats(), show(frontier), show(committed)), file=sys.stderr)
            return
        time.sleep(0.05)


def consume(c, e, t, end, deadline):
    n = e["records"]
    members = {}

    def step(gate):
        # The last step opens the gate for good: records redelivered after a rebalance must
        # be processed again even once every record was seen once.
        t.open(gate if gate < n else float("inf"))
        t.wait(gate, deadline)
        settle(c, e, t)

    try:
        for ident in (0, 1, 2):
            members[ident] = Member(e, ident, t)
        wait_group(c, e, "Stable", 3, deadline)
        step(n // 4)
        members.pop(0).close()
        wait_group(c, e, "Stable", 2, deadline)
        step(n // 2)
        members[3] = Member(e, 3, t)
        wait_group(c, e, "Stable", 3, deadline)
        step(3 * n // 4)
        before = c.fetch_offsets(e["group"])
        if e["restart"]:
            r = subprocess.run(["sh", "-c", e["restart"]], capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise Fail("restart broker: %s" % r.stderr.strip())
        after = retry(min(deadline, time.time() + 20), lambda: c.fetch_offsets(e["group"]))
        if any(after.get(p, 0) < o for p, o in before.items()):
            raise Fail("committed offsets went back across the broker restart: before %s, after %s" % (show(before), show(after)))
        step(n)
        until = min(deadline, time.time() + 30)
        while True:
            try:
                got = c.fetch_offsets(e["group"])
            except Exception:  # noqa: BLE001 - retried until the deadline
                got = {}
            if got == end:
                break
            if time.time() > until:
                raise Fail("all records consumed (%s), but committed offsets %s, want the log end %s" % (t.stats(), show(got), show(end)))
            time.sleep(0.1)
        for ident in sorted(members):
            members.pop(ident).close()
    finally:
        for m in members.values():
            m.close()
    t.check()
    got = c.fetch_offsets(e["group"])
    if got != end:
        raise Fail("after every member left: committed offsets %s, want the log end %s" % (show(got), show(end)))
    return t.stats()


def administer_consumer_protocol(c, e):
    """confluent-kafka-python 1.7 has no ConsumerGroupDescribe: the Go helper runs the admin
    steps (list, describe, fetch, reset, delete offsets, delete the group), then the client
    checks the deletion with its own OffsetFetch."""
    out = c.go_helper("admin")
    got = c.fetch_offsets(e["group"])
    if got:
        raise Fail("offsets after the group was deleted: %s, want none" % show(got))
    return "admin by the Go helper with ConsumerGroupDescribe (%s); OffsetFetch of the deleted group: no offsets" % out.replace("admin: ", "")


def administer(c, e, end):
    if CONSUMER_PROTOCOL:
        return administer_consumer_protocol(c, e)
    g = e["group"]
    groups = c.list_groups()
    if g not in groups:
        raise Fail("list groups: %s missing from %s" % (g, sorted(groups)))
    if groups[g] not in ("", "Empty"):
        raise Fail("list groups: %s is %s, want Empty" % (g, groups[g]))
    d = c.describe_group(g)
    if d["state"] != "Empty" or d["members"] != 0:
        raise Fail("describe group: %s with %d members, want Empty with 0" % (d["state"], d["members"]))
    zero = {p: 0 for p in end}
    c.commit_offsets(zero)
    got = c.fetch_offsets(g)
    if got != zero:
        raise Fail("offsets after reset: %s, want %s" % (show(got), show(zero)))
    c.go_helper("delete-offsets", "0")
    got = c.fetch_offsets(g)
    if 0 in got or len(got) != len(end) - 1:
        raise Fail("offsets after deleting partition 0: %s, want every partition but 0" % show(got))
    c.go_helper("delete-group")
    groups = c.list_groups()
    if g in groups:
        raise Fail("list groups after delete: %s still listed (%s)" % (g, groups[g]))
    d = c.describe_group(g)
    if d["state"] != "Dead" or d["members"] != 0:
        raise Fail("describe group after delete: %s with %d members, want Dead" % (d["state"], d["members"]))
    note = ""
    try:
        got = c.fetch_offsets(g)
    except KafkaException as err:
        # Apache answers OffsetFetch of an unknown group with no offsets and no error;
        # accept GROUP_ID_NOT_FOUND too, but say so.
        if err.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
            raise
        got = {}
        note = "; note: OffsetFetch of the deleted group answered GROUP_ID_NOT_FOUND where Apache answers no offsets"
    if got:
        raise Fail("offsets after delete group: %s, want none" % show(got))
    return "admin: list groups, describe group, fetch offsets, reset offsets, delete offsets, delete group; " \
           "delete offsets and delete group by the Go helper (confluent-kafka-python %s has no such AdminClient calls)%s" % (version()[0], note)


def run(e):
    deadline = time.time() + e["timeout"]
    n = e["records"]
    c = Client(e)
    try:
        try:
            c.create_topic()
        except Exception as err:  # noqa: BLE001 - becomes the FAIL reason
            raise Fail("create topic %s with %d partitions: %s" % (e["topic"], e["partitions"], err))
        try:
            c.produce(n)
        except Fail as err:
            raise Fail("produce %d records: %s" % (n, err))
        end = c.end_offsets()
        if len(end) != e["partitions"] or sum(end.values()) != n or min(end.values()) <= 0:
            raise Fail("after produce: end offsets %s, want %d non-empty partitions holding %d" % (show(end), e["partitions"], n))
        t = Tracker(n, end)
        try:
            stats = consume(c, e, t, end, deadline)
        except Fail as err:
            raise Fail("consume: %s" % err)
        try:
            admin = administer(c, e, end)
        except Fail as err:
            raise Fail("admin: %s" % err)
    finally:
        c.close()
    if PROTOCOL_ERRORS.seen:
        raise Fail("librdkafka protocol errors (%d), first: %s" % (len(PROTOCOL_ERRORS.seen), " ".join(PROTOCOL_ERRORS.seen[:2])))
    restart = "1 broker restart" if e["restart"] else "no broker restart (E2E_RESTART unset)"
    return "%d produced to %d partitions; consumed by a group through 1 leave, 1 join, %s (%s); committed = log end; %s" % (
        n, e["partitions"], restart, stats, admin)


def main():
    e = env()
    start = time.time()
    name = "%s (%s, librdkafka %s%s)" % (NAME, version()[0], libversion()[0],
                                          ", consumer group protocol (KIP-848), watched with ConsumerGroupDescribe" if CONSUMER_PROTOCOL else "")
    try:
        summary = run(e)
    except Exception as err:  # noqa: BLE001 - every failure is one FAIL line
        print("FAIL %s: %s (after %.1fs)" % (name, err, time.time() - start), flush=True)
        os._exit(1)
    print("PASS %s: %s (%.1fs)" % (name, summary, time.time() - start), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
