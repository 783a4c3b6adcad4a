'use strict';
// The e2e scenario with node-rdkafka (librdkafka): an idempotent producer with acks=all,
// consumer-group members that store a record's offset only after the tracker took it
// (enable.auto.offset.store off) and auto-commit the stored offsets; a member held at the
// gate pauses the partition and seeks back to the record it holds, so it neither loses nor
// skips it. node-rdkafka has CreateTopics but no group admin: the group is watched and
// administered by the Go helper e2e/clients/check (kadm), as for kcat, while committed
// offsets are fetched and reset with the library's own OffsetFetch and OffsetCommit.
//
// E2E_GROUP_PROTOCOL=consumer runs the members on the consumer group protocol (KIP-848,
// group.protocol=consumer, the broker's uniform assignor) with node-rdkafka 3.6.1 of e2e/js848,
// built with the librdkafka 2.12 it bundles (Debian's 2.0.2, which e2e/js builds against, has
// no KIP-848). The helper then watches and administers the group with ConsumerGroupDescribe,
// which does not know a classic group: a member that fell back to the classic protocol would
// never let the group reach the awaited state.

// Every member's consume() and every committed() takes a libuv pool thread while it waits:
// four members, the tool consumer and the producer need more than the default four.
process.env.UV_THREADPOOL_SIZE = process.env.UV_THREADPOOL_SIZE || '16';

const { execFile } = require('node:child_process');
const path = require('node:path');
const { Unsupported, key, value, sleep, main } = require('./scenario');

const consumerProtocol = process.env.E2E_GROUP_PROTOCOL === 'consumer';
const from = { paths: [consumerProtocol ? path.join(__dirname, '..', 'js848') : __dirname] };
const Kafka = require(require.resolve('node-rdkafka', from));
const version = require(require.resolve('node-rdkafka/package.json', from)).version.replace(/^v/, '');
const debug = process.env.E2E_DEBUG === '1';
const ERR = Kafka.CODES.ERRORS;

// librdkafka logs a response it cannot parse and carries on with what it parsed before it:
// the scenario can pass around a protocol error, so any is a failure of its own. The admin
// client's log is not delivered to JS by node-rdkafka; a CreateTopics response it cannot
// parse fails createTopic itself.
const protocolErrors = [];
const memberErrors = [];

function watch(client, name) {
  client.on('event.log', (l) => {
    const line = `${new Date().toISOString()} ${name} ${l.fac} ${l.message}`;
    if (l.fac === 'PROTOERR' || /PROTOERR|Protocol parse failure/.test(l.message)) protocolErrors.push(line);
    console.error(`librdkafka: ${line}`);
  });
  client.on('event.error', (err) => console.error(`${new Date().toISOString()} ${name} error: ${err.message} (${err.code})`));
  return client;
}

function base(e, extra) {
  return {
    'metadata.broker.list': e.brokers.join(','),
    'client.id': 'e2e-rdkafka',
    'reconnect.backoff.ms': 100,
    'reconnect.backoff.max.ms': 1000,
    'log.connection.close': false,
    ...(debug ? { debug: 'cgrp,consumer,protocol' } : {}),
    ...extra,
  };
}

const call = (fn) => new Promise((resolve, reject) => fn((err, v) => (err ? reject(err) : resolve(v))));

// A group member: consume() in batches on its own loop; librdkafka heartbeats, commits and
// rebalances on its threads.
class Member {
  constructor(e, id, t) {
    this.e = e;
    this.t = t;
    this.name = `rdkafka-${id}`;
    this.held = new Map(); // partition -> offset of the record held at the gate
    this.stopping = false;
    const self = this;
    this.c = watch(new Kafka.KafkaConsumer(base(e, {
      'group.id': e.group,
      'client.id': this.name,
      'enable.auto.commit': true,
      'enable.auto.offset.store': false,
      'auto.commit.interval.ms': 300,
      // The consumer protocol takes the session timeout and heartbeat interval from the
      // broker: librdkafka refuses them (and partition.assignment.strategy) there.
      ...(consumerProtocol
        ? { 'group.protocol': 'consumer', 'group.remote.assignor': 'uniform' }
        : { 'session.timeout.ms': 10000, 'heartbeat.interval.ms': 500 }),
      rebalance_cb(err, assignment) { self.rebalanced(err, assignment); },
    }), { 'auto.offset.reset': 'earliest' }), this.name);
    this.c.setDefaultConsumeTimeout(50);
  }

  async start() {
    await call((cb) => this.c.connect({ timeout: 10000 }, cb));
    this.c.subscribe([this.e.topic]);
    this.loop = this.run();
  }

  // rebalanced is the rebalance callback. librdkafka waits for the assign or unassign call:
  // on the classic protocol (eager) every partition is revoked, then the new assignment
  // given; on the consumer protocol (incremental) only the partitions that move are.
  rebalanced(err, assignment) {
    const parts = assignment.map(({ topic, partition }) => ({ topic, partition }));
    const incremental = consumerProtocol;
    const attempt = (what, fn) => {
      try {
        fn();
      } catch (e) {
        memberErrors.push(`${this.name} ${what} ${parts.map((p) => p.partition)}: ${e.message}`);
        console.error(`${this.name}: ${what} ${parts.map((p) => p.partition)}: ${e.message}`);
      }
    };
    if (err && err.code === ERR.ERR__ASSIGN_PARTITIONS) {
      if (debug) console.error(`${new Date().toISOString()} ${this.name} assigned ${parts.map((p) => p.partition)}`);
      attempt('assign', () => (incremental ? this.c.incrementalAssign(assignment) : this.c.assign(assignment)));
      // librdkafka keeps a partition's pause across a rebalance: a partition held here
      // before and assigned back must not stay stopped.
      attempt('resume', () => this.c.resume(parts));
      return;
    }
    if (debug) console.error(`${new Date().toISOString()} ${this.name} revoked ${parts.map((p) => p.partition)} (${err && err.message})`);
    const held = parts.filter((p) => this.held.has(p.partition));
    for (const p of held) this.held.delete(p.partition);
    if (held.length && !this.stopping) attempt('resume', () => this.c.resume(held));
    // With enable.auto.commit, unassign commits the stored offsets of the revoked partitions.
    attempt('unassign', () => (incremental ? this.c.incrementalUnassign(assignment) : this.c.unassign()));
  }

  async run() {
    const { t } = this;
    while (!this.stopping) {
      if (this.held.size && t.admitted()) {
        const held = [...this.held.keys()].map((partition) => ({ topic: this.e.topic, partition }));
        this.held.clear();
        try {
          this.c.resume(held);
        } catch (err) {
          console.error(`${this.name}: resume ${held.map((h) => h.partition)}: ${err.message}`);
        }
      }
      let msgs;
      try {
        msgs = await call((cb) => this.c.consume(500, cb));
      } catch (err) {
        memberErrors.push(`${this.name} consume: ${err.message} (${err.code})`);
        console.error(`${this.name}: consume: ${err.message} (${err.code})`);
        await sleep(50);
        continue;
      }
      for (const m of msgs) {
        if (this.stopping) return;
        // Records fetched past the one held: read again once the partition resumes.
        if (this.held.has(m.partition)) continue;
        if (!t.admitted()) {
          this.hold(m);
          continue;
        }
        t.consumed(this.name, m.partition, m.offset, m.key, m.value);
        try {
          this.c.offsetsStore([{ topic: m.topic, partition: m.partition, offset: m.offset + 1 }]);
        } catch (err) {
          // The partition was revoked meanwhile: its next owner reads the record again.
          console.error(`${this.name}: store offset ${m.partition}/${m.offset + 1}: ${err.message}`);
        }
      }
    }
  }

  // hold stops the partition and rewinds it to this record, which was neither taken nor
  // stored.
  hold(m) {
    const tp = { topic: m.topic, partition: m.partition };
    this.held.set(m.partition, m.offset);
    try {
      this.c.pause([tp]);
      this.c.seek({ ...tp, offset: m.offset }, 0, (err) => {
        if (err) console.error(`${this.name}: seek ${m.partition}/${m.offset}: ${err.message}`);
      });
    } catch (err) {
      console.error(`${this.name}: hold ${m.partition}/${m.offset}: ${err.message}`);
    }
  }

  // close stops consuming, then closes the consumer: librdkafka commits the stored offsets
  // and leaves the group (LeaveGroup).
  async close() {
    this.stopping = true;
    await this.loop;
    if (debug) console.error(`${new Date().toISOString()} ${this.name} closing`);
    await call((cb) => this.c.disconnect(cb));
    if (debug) console.error(`${new Date().toISOString()} ${this.name} closed`);
  }
}

// helper runs the Go helper e2e/clients/check with the scenario's environment.
function helper(...args) {
  const bin = path.join(process.env.E2E_BIN || '', 'check');
  return new Promise((resolve, reject) => {
    execFile(bin, args, { timeout: 70000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`check ${args.join(' ')}: ${(stdout || stderr || err.message).trim()}`));
      else resolve(stdout.trim());
    });
  });
}

async function newClient(e) {
  const admin = Kafka.AdminClient.create(base(e, { 'client.id': 'e2e-rdkafka-admin' }));
  // Not subscribed: used for metadata, watermarks, OffsetFetch and the simple (generation
  // -1) OffsetCommit of a reset; it never joins the group.
  const tool = watch(new Kafka.KafkaConsumer(base(e, { 'group.id': e.group, 'client.id': 'e2e-rdkafka-tool', 'enable.auto.commit': false }), {}), 'tool');
  await call((cb) => tool.connect({ timeout: 10000 }, cb));
  let partitions = [];
  const noGroupAdmin = new Unsupported(`node-rdkafka ${version} has no group admin`);

  return {
    async close() {
      admin.disconnect();
      await call((cb) => tool.disconnect(cb));
    },

    async createTopic(topic, numPartitions) {
      await call((cb) => admin.createTopic({ topic, num_partitions: numPartitions, replication_factor: 1 }, 15000, cb));
    },

    async produce(topic, n) {
      const p = watch(new Kafka.Producer(base(e, {
        'client.id': 'e2e-rdkafka-producer',
        acks: 'all',
        'enable.idempotence': true,
        'linger.ms': 5,
        'retry.backoff.ms': 100,
        dr_cb: true,
      })), 'producer');
      let acked = 0;
      const failed = [];
      p.on('delivery-report', (err) => {
        if (err) failed.push(err);
        else acked++;
      });
      await call((cb) => p.connect({ timeout: 10000 }, cb));
      p.setPollInterval(10);
      try {
        for (let i = 0; i < n;) {
          try {
            p.produce(topic, null, Buffer.from(value(i)), key(i));
            i++;
          } catch (err) {
            if (err.code !== ERR.ERR__QUEUE_FULL) throw err;
            await sleep(5);
          }
        }
        await call((cb) => p.flush(30000, cb));
        const until = Date.now() + 5000;
        while (acked + failed.length < n && Date.now() < until) await sleep(10);
      } finally {
        p.setPollInterval(0);
        await call((cb) => p.disconnect(cb));
      }
      if (acked !== n) throw new Error(`${n - acked} records not acknowledged, ${failed.length} failed (first: ${failed[0] && failed[0].message})`);
    },

    async endOffsets(topic) {
      const md = await call((cb) => tool.getMetadata({ topic, timeout: 10000 }, cb));
      const tm = md.topics.find((x) => x.name === topic);
      if (!tm) throw new Error(`topic ${topic} missing from the metadata`);
      partitions = tm.partitions.map((x) => x.id).sort((a, b) => a - b);
      const end = new Map();
      for (const p of partitions) {
        const w = await call((cb) => tool.queryWatermarkOffsets(topic, p, 10000, cb));
        end.set(p, w.highOffset);
      }
      return end;
    },

    async newMember(id, t) {
      const m = new Member(e, id, t);
      await m.start();
      return m;
    },

    waitGroup(group, state, members) {
      return helper('wait-group', state, String(members));
    },

    async listGroups() { throw noGroupAdmin; },
    async describeGroup() { throw noGroupAdmin; },

    async fetchOffsets(group, topic) {
      const got = await call((cb) => tool.committed(partitions.map((partition) => ({ topic, partition })), 10000, cb));
      const out = new Map();
      for (const tp of got) {
        if (tp instanceof Error) throw tp;
        if (tp.offset !== undefined && tp.offset >= 0) out.set(tp.partition, tp.offset);
      }
      return out;
    },

    async commitOffsets(group, topic, offsets) {
      tool.commitSync([...offsets].map(([partition, offset]) => ({ topic, partition, offset })));
    },

    async deleteOffsets() { throw noGroupAdmin; },
    async deleteGroup() { throw noGroupAdmin; },

    helperAdmin: () => helper('admin'),

    // verify fails on a librdkafka protocol error; after a failure it also names the first
    // error a member saw, often the cause.
    async verify(failed) {
      await sleep(100); // log events reach JS through the event loop
      const why = [];
      if (protocolErrors.length) why.push(`librdkafka protocol errors (${protocolErrors.length}), first: ${protocolErrors.slice(0, 2).join(' ')}`);
      if (failed && memberErrors.length) why.push(`first member error: ${memberErrors[0]}`);
      if (why.length) throw new Error(why.join('; '));
    },
  };
}

const protocol = consumerProtocol ? ', consumer group protocol (KIP-848), watched with ConsumerGroupDescribe' : '';
main(`node-rdkafka (${version}, librdkafka ${Kafka.librdkafkaVersion}${protocol})`, newClient);
