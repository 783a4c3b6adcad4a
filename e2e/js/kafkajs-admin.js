'use strict';
// The admin scenario with kafkajs's admin client, as e2e/clients/saramaadmin does it with
// sarama: create a compacted topic with configs, describe its configs (values and sources),
// alter them with AlterConfigs (kafkajs has no IncrementalAlterConfigs: the legacy call
// replaces the topic's whole set, so a config left out goes back to its default), describe
// the cluster (kafkajs answers it from Metadata), delete the records below an offset (the low
// watermark moves there and a consumer from the beginning starts there), delete the topic.
// kafkajs has no DescribeLogDirs.

const { Kafka, logLevel, ConfigResourceTypes, ConfigSource } = require('kafkajs');

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

const NAME = 'kafkajs-admin';
const RECORDS = 20; // to partition 0: keys k0..k9, each twice
const CUT = 10; // deleteTopicRecords before this offset of partition 0

const env = {
  brokers: (process.env.E2E_BROKERS || '127.0.0.1:9092').split(','),
  topic: process.env.E2E_TOPIC || 'e2e-kafkajs-admin',
  group: process.env.E2E_GROUP || 'e2e-kafkajs-admin-group',
  timeoutMs: Number(process.env.E2E_TIMEOUT_S || 60) * 1000,
};

const kafka = new Kafka({
  clientId: 'e2e-kafkajs-admin',
  brokers: env.brokers,
  logLevel: process.env.E2E_DEBUG ? logLevel.DEBUG : logLevel.WARN,
  logCreator: () => ({ namespace, level, log }) => console.error(`[kafkajs ${level}] ${namespace}: ${log.message} ${log.error || ''}`),
  retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 30 },
});

const sourceName = (s) => Object.keys(ConfigSource).find((k) => ConfigSource[k] === s) || `source ${s}`;

async function describe(admin, topic) {
  const { resources } = await admin.describeConfigs({
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }],
    includeSynonyms: false,
  });
  const [r] = resources;
  if (r.errorCode) {
    throw new Error(`describe configs of ${topic}: error ${r.errorCode} ${r.errorMessage}`);
  }
  return new Map(r.configEntries.map((e) => [e.configName, e]));
}

function want(cfgs, name, value, ...sources) {
  const e = cfgs.get(name);
  if (!e) {
    return `${name} not described`;
  }
  if (value !== undefined && e.configValue !== value) {
    return `${name} = ${e.configValue}, want ${value}`;
  }
  if (!sources.includes(e.configSource)) {
    return `${name} (${e.configValue}) source ${sourceName(e.configSource)}, want ${sources.map(sourceName).join(' or ')}`;
  }
  return '';
}

function check(what, ...problems) {
  const p = problems.filter((x) => x);
  if (p.length) {
    throw new Error(`${what}: ${p.join('; ')}`);
  }
}

// firstRecord reads partition 0 of topic from the beginning in a fresh group and returns
// the first record it is given.
async function firstRecord(topic, deadline) {
  const consumer = kafka.consumer({ groupId: `${env.group}-first`, maxWaitTimeInMs: 100, heartbeatInterval: 500 });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    let resolve;
    const got = new Promise((r) => { resolve = r; });
    await consumer.run({ autoCommit: false, eachMessage: async ({ partition, message }) => { if (partition === 0) resolve(message); } });
    const timer = new Promise((_, reject) => setTimeout(() => reject(new Error('no record from the beginning of partition 0')), deadline - Date.now()));
    return await Promise.race([got, timer]);
  } finally {
    await consumer.disconnect();
  }
}

async function run(admin) {
  const deadline = Date.now() + env.timeoutMs;
  const topic = env.topic;
  const steps = [];
  const { TOPIC_CONFIG, DEFAULT_CONFIG, STATIC_BROKER_CONFIG } = ConfigSource;

  // 1. A compacted topic with configs.
  const created = await admin.createTopics({
    topics: [{
      topic,
      numPartitions: 2,
      replicationFactor: 1,
      configEntries: [
        { name: 'cleanup.policy', value: 'compact' },
        { name: 'retention.ms', value: '3600000' },
        { name: 'max.message.bytes', value: '200000' },
      ],
    }],
  });
  if (!created) {
    throw new Error(`create topic ${topic}: not created`);
  }
  let cfgs = await describe(admin, topic);
  check('after create',
    want(cfgs, 'cleanup.policy', 'compact', TOPIC_CONFIG),
    want(cfgs, 'retention.ms', '3600000', TOPIC_CONFIG),
    want(cfgs, 'max.message.bytes', '200000', TOPIC_CONFIG),
    want(cfgs, 'segment.bytes', undefined, DEFAULT_CONFIG, STATIC_BROKER_CONFIG));
  steps.push(`created compacted, ${cfgs.size} configs described (set ones from the topic, segment.bytes from ${sourceName(cfgs.get('segment.bytes').configSource)})`);

  // 2. AlterConfigs (legacy): the whole set replaced, max.message.bytes left out.
  await admin.alterConfigs({
    validateOnly: false,
    resources: [{
      type: ConfigResourceTypes.TOPIC,
      name: topic,
      configEntries: [
        { name: 'cleanup.policy', value: 'compact' },
        { name: 'retention.ms', value: '7200000' },
      ],
    }],
  });
  cfgs = await describe(admin, topic);
  check('after alter configs',
    want(cfgs, 'cleanup.policy', 'compact', TOPIC_CONFIG),
    want(cfgs, 'retention.ms', '7200000', TOPIC_CONFIG),
    want(cfgs, 'max.message.bytes', undefined, DEFAULT_CONFIG, STATIC_BROKER_CONFIG));
  steps.push(`AlterConfigs replaced the set (retention.ms 7200000, max.message.bytes back to ${cfgs.get('max.message.bytes').configValue} from ${sourceName(cfgs.get('max.message.bytes').configSource)})`);

  // 3. describeCluster.
  const cluster = await admin.describeCluster();
  const addrs = cluster.brokers.map((b) => `${b.host}:${b.port}`);
  if (!cluster.brokers.some((b) => b.nodeId === cluster.controller) || !addrs.includes(env.brokers[0]) || !cluster.clusterId) {
    throw new Error(`describe cluster: ${JSON.stringify(cluster)}: want the controller among the brokers, ${env.brokers[0]} listed, a cluster id`);
  }
  steps.push(`describeCluster ${cluster.brokers.length} broker(s), controller ${cluster.controller}, cluster id ${cluster.clusterId}`);

  // 4. Records, deleteTopicRecords, the low watermark and a consumer from the beginning.
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  try {
    const messages = [];
    for (let i = 0; i < RECORDS; i++) {
      messages.push({ partition: 0, key: `k${i % 10}`, value: `v${i}` });
    }
    await producer.send({ topic, acks: -1, messages });
  } finally {
    await producer.disconnect();
  }
  await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: String(CUT) }] });
  const offsets = await admin.fetchTopicOffsets(topic);
  const p0 = offsets.find((o) => o.partition === 0);
  if (Number(p0.low) !== CUT || Number(p0.high) !== RECORDS) {
    throw new Error(`partition 0's offsets after deleteTopicRecords(${CUT}): low ${p0.low}, high ${p0.high}, want ${CUT}, ${RECORDS}`);
  }
  const first = await firstRecord(topic, deadline);
  if (Number(first.offset) !== CUT || String(first.key) !== `k${CUT % 10}` || String(first.value) !== `v${CUT}`) {
    throw new Error(`a consumer from the beginning began at ${first.offset} (${first.key}=${first.value}), want ${CUT}`);
  }
  steps.push(`deleteTopicRecords before ${CUT}: low watermark ${p0.low}, a consumer from the beginning begins there`);

  // 5. deleteTopics.
  await admin.deleteTopics({ topics: [topic] });
  for (;;) {
    const topics = await admin.listTopics();
    if (!topics.includes(topic)) {
      break;
    }
    if (Date.now() > deadline) {
      throw new Error(`${topic} still listed after its deletion`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  steps.push('topic deleted; no DescribeLogDirs or IncrementalAlterConfigs in kafkajs');
  return steps.join('; ');
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
