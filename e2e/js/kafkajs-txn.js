'use strict';
// The transactions scenario with kafkajs, as e2e/clients/saramatxn does it with sarama: a
// transactional producer (producer.transaction(): send, commit, abort) writes transactions
// over every partition of a topic, some committed and some aborted; a consumer with
// readUncommitted false must see exactly the committed records, each once, and one with
// readUncommitted true every record. Then consume-transform-produce: a group member
// (readUncommitted false, no auto commit) consumes the committed records, a transactional
// producer copies them to a second topic with the member's offsets in the transaction
// (sendOffsets), once aborted and then redone and committed. The group's offsets must not
// be visible while the transaction is open (kafkajs's fetchOffsets) nor after the abort, and
// be the consumed positions after the commit (asked with require_stable, which kafkajs's
// OffsetFetch lacks, by the Go helper `check stable-offsets`); the output topic holds each
// record once at read_committed and twice at read_uncommitted.

const { execFileSync } = require('child_process');
const path = require('path');
const { Kafka, logLevel } = require('kafkajs');

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

const NAME = 'kafkajs-txn';
const PARTITIONS = 3;
const TXNS = 6; // transactions t with t % 3 == 1 are aborted; the last one is committed
const PER_PART = 3; // records per partition per transaction

const aborted = (t) => t % 3 === 1;
const key = (t, p, r) => `t${t}-p${p}-r${r}`;
const last = (p) => key(TXNS - 1, p, PER_PART - 1);

const env = {
  brokers: (process.env.E2E_BROKERS || '127.0.0.1:9092').split(','),
  topic: process.env.E2E_TOPIC || 'e2e-kafkajs-txn',
  group: process.env.E2E_GROUP || 'e2e-kafkajs-txn-group',
  timeoutMs: Number(process.env.E2E_TIMEOUT_S || 60) * 1000,
  bin: process.env.E2E_BIN || '',
};

const kafka = new Kafka({
  clientId: 'e2e-kafkajs-txn',
  brokers: env.brokers,
  logLevel: process.env.E2E_DEBUG ? logLevel.DEBUG : logLevel.WARN,
  logCreator: () => ({ namespace, level, log }) => console.error(`[kafkajs ${level}] ${namespace}: ${log.message} ${log.error || ''}`),
  retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 30 },
});

// consume reads topic from its start in a fresh group (or `group`) until every partition's
// last record has come n times; it returns [{partition, offset, key, value}] and the
// consumer, still connected.
async function consume(topic, readUncommitted, n, group) {
  const consumer = kafka.consumer({
    groupId: group || `${env.group}-${topic}-${readUncommitted ? 'ru' : 'rc'}`,
    readUncommitted,
    sessionTimeout: 10000,
    heartbeatInterval: 500,
    maxWaitTimeInMs: 100,
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got = [];
  const seen = new Map();
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      const k = message.key.toString();
      got.push({ partition, offset: Number(message.offset), key: k, value: message.value.toString() });
      if (k === last(partition)) seen.set(partition, (seen.get(partition) || 0) + 1);
      if ([...Array(PARTITIONS).keys()].every((p) => (seen.get(p) || 0) >= n)) done();
    },
  });
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${topic}: ${got.length} records read, last records seen ${JSON.stringify([...seen])} of ${n} times`)), env.timeoutMs);
  });
  try {
    await Promise.race([finished, timeout]);
  } finally {
    clearTimeout(timer);
  }
  return { got, consumer };
}

async function read(topic, readUncommitted, n) {
  const { got, consumer } = await consume(topic, readUncommitted, n);
  await consumer.disconnect();
  return got;
}

function exactly(got, want, n, what) {
  const count = new Map();
  for (const m of got) count.set(m.key, (count.get(m.key) || 0) + 1);
  const bad = [];
  for (const k of [...want].sort()) if ((count.get(k) || 0) !== n) bad.push(`${k} ${count.get(k) || 0} times`);
  for (const [k, c] of count) if (!want.has(k)) bad.push(`${k} (not expected) ${c} times`);
  if (bad.length) throw new Error(`${what}: ${got.length} records read, want ${want.size} each ${n} times: ${bad.slice(0, 6).join(', ')}`);
}

// stableOffsets asks the Go helper for the group's offsets with require_stable.
function stableOffsets(topic, group) {
  const out = execFileSync(path.join(env.bin, 'check'), ['stable-offsets'], {
    env: { ...process.env, E2E_TOPIC: topic, E2E_GROUP: group, E2E_PARTITIONS: String(PARTITIONS) },
    encoding: 'utf8',
  });
  return out.trim();
}

const show = (m) => [...m].sort((a, b) => a[0] - b[0]).map(([p, o]) => `${p}:${o}`).join(' ');

async function run(admin) {
  const src = env.topic;
  const dst = `${env.topic}-out`;
  const created = await admin.createTopics({ topics: [src, dst].map((topic) => ({ topic, numPartitions: PARTITIONS, replicationFactor: 1 })), waitForLeaders: true });
  if (!created) throw new Error(`topics ${src}, ${dst} already exist`);

  // 1. Transactions over every partition, some aborted.
  const committed = new Set();
  const abortedKeys = new Set();
  const producer = kafka.producer({ transactionalId: `${src}-producer`, maxInFlightRequests: 1, idempotent: true, allowAutoTopicCreation: false });
  await producer.connect();
  try {
    for (let t = 0; t < TXNS; t++) {
      const txn = await producer.transaction();
      const messages = [];
      for (let p = 0; p < PARTITIONS; p++) {
        for (let r = 0; r < PER_PART; r++) {
          const k = key(t, p, r);
          (aborted(t) ? abortedKeys : committed).add(k);
          messages.push({ key: k, value: aborted(t) ? 'abort' : 'commit', partition: p });
        }
      }
      try {
        await txn.send({ topic: src, acks: -1, messages });
      } catch (err) {
        await txn.abort().catch(() => {});
        throw new Error(`transaction ${t}: send: ${err.message}`);
      }
      await (aborted(t) ? txn.abort() : txn.commit());
    }
  } finally {
    await producer.disconnect();
  }
  exactly(await read(src, false, 1), committed, 1, `readUncommitted false ${src}`);
  exactly(await read(src, true, 1), new Set([...committed, ...abortedKeys]), 1, `readUncommitted true ${src}`);

  // 2. Consume-transform-produce with the member's offsets in the transaction.
  const { got: records, consumer: member } = await consume(src, false, 1, env.group);
  exactly(records, committed, 1, `the group member (readUncommitted false) on ${src}`);
  const want = new Map();
  for (const m of records) want.set(m.partition, Math.max(want.get(m.partition) || 0, m.offset + 1));
  const ctp = kafka.producer({ transactionalId: `${src}-ctp`, maxInFlightRequests: 1, idempotent: true, allowAutoTopicCreation: false });
  await ctp.connect();
  try {
    for (const commit of [false, true]) {
      const txn = await ctp.transaction();
      await txn.send({ topic: dst, acks: -1, messages: records.map((m) => ({ key: m.key, value: `copy-${m.value}`, partition: m.partition })) });
      await txn.sendOffsets({
        consumerGroupId: env.group,
        topics: [{ topic: src, partitions: [...want].map(([partition, offset]) => ({ partition, offset: String(offset) })) }],
      });
      const open = (await admin.fetchOffsets({ groupId: env.group, topics: [src] }))[0].partitions.filter((p) => Number(p.offset) >= 0);
      if (open.length) throw new Error(`the group's offsets are ${open.map((p) => `${p.partition}:${p.offset}`).join(' ')} while the transaction is open, want none`);
      await (commit ? txn.commit() : txn.abort());
      const got = stableOffsets(src, env.group);
      const expect = commit ? show(want) : '';
      if (got !== expect) throw new Error(`the group's offsets after the ${commit ? 'commit' : 'abort'} are "${got}", want "${expect}"`);
    }
    const seen = (await admin.fetchOffsets({ groupId: env.group, topics: [src] }))[0].partitions.map((p) => [p.partition, Number(p.offset)]);
    if (show(seen) !== show(want)) throw new Error(`kafkajs's fetchOffsets after the commit: ${show(seen)}, want ${show(want)}`);
  } finally {
    await ctp.disconnect();
    await member.disconnect();
  }
  exactly(await read(dst, false, 1), committed, 1, `readUncommitted false ${dst}`);
  exactly(await read(dst, true, 2), committed, 2, `readUncommitted true ${dst}`);

  return `${TXNS} transactions over ${PARTITIONS} partitions (${abortedKeys.size / (PARTITIONS * PER_PART)} aborted): readUncommitted false saw the ${committed.size} committed records once each, readUncommitted true all ${committed.size + abortedKeys.size}; `
    + `consume-transform-produce with sendOffsets for a group member, aborted then committed: the group's offsets ${show(want)} only after the commit (require_stable by the Go helper), `
    + 'read_committed output each record once, read_uncommitted twice';
}

async function main() {
  const start = Date.now();
  const secs = () => ((Date.now() - start) / 1000).toFixed(1);
  const name = `${NAME} (kafkajs ${require('kafkajs/package.json').version})`;
  const timer = setTimeout(() => {
    console.log(`FAIL ${name}: no verdict within ${env.timeoutMs / 1000}s (after ${secs()}s)`);
    process.exit(1);
  }, env.timeoutMs + 2000);
  const admin = kafka.admin();
  try {
    await admin.connect();
    const summary = await run(admin);
    console.log(`PASS ${name}: ${summary} (${secs()}s)`);
    process.exitCode = 0;
  } catch (err) {
    console.log(`FAIL ${name}: ${err.message} (after ${secs()}s)`);
    process.exitCode = 1;
  } finally {
    await admin.disconnect().catch(() => {});
    clearTimeout(timer);
  }
  setTimeout(() => process.exit(), 100).unref();
}

main();
