'use strict';
// The e2e scenario with kafkajs: a producer with acks=all, consumer-group members that
// resolve each record only after the tracker took it (eachBatch, manual resolve), and the
// kafkajs admin (which has no OffsetDelete).

const { Kafka, logLevel, AssignerProtocol } = require('kafkajs');
const { Unsupported, key, value, admit, main } = require('./scenario');

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

async function newClient(e) {
  const kafka = new Kafka({
    clientId: 'e2e-kafkajs',
    brokers: e.brokers,
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, level, log }) => console.error(`[kafkajs ${level}] ${namespace}: ${log.message} ${log.error || ''}`),
    // The broker restarts once: keep retrying through it.
    retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 30 },
  });
  const admin = kafka.admin();
  await admin.connect();
  let partitions = [];

  const codeOf = (offset) => Number(offset);

  return {
    async close() { await admin.disconnect(); },

    async createTopic(topic, numPartitions) {
      const created = await admin.createTopics({ topics: [{ topic, numPartitions, replicationFactor: 1 }], waitForLeaders: true });
      if (!created) throw new Error(`topic ${topic} already exists`);
    },

    async produce(topic, n) {
      const producer = kafka.producer({ allowAutoTopicCreation: false });
      await producer.connect();
      try {
        for (let i = 0; i < n; i += 1000) {
          const messages = [];
          for (let j = i; j < Math.min(n, i + 1000); j++) messages.push({ key: key(j), value: value(j) });
          await producer.send({ topic, acks: -1, messages });
        }
      } finally {
        await producer.disconnect();
      }
    },

    async endOffsets(topic) {
      const offsets = await admin.fetchTopicOffsets(topic);
      partitions = offsets.map((o) => o.partition);
      return new Map(offsets.map((o) => [o.partition, codeOf(o.high)]));
    },

    async newMember(id, t) {
      const name = `kafkajs-${id}`;
      const consumer = kafka.consumer({
        groupId: e.group,
        sessionTimeout: 10000,
        rebalanceTimeout: 10000,
        heartbeatInterval: 500,
        maxWaitTimeInMs: 200,
        retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 30 },
      });
      let closing = false;
      if (process.env.E2E_DEBUG === '1') {
        const { COMMIT_OFFSETS, GROUP_JOIN } = consumer.events;
        consumer.on(COMMIT_OFFSETS, ({ payload }) => console.error(`${new Date().toISOString()} ${name} commit gen ${payload.groupGenerationId}: ${JSON.stringify(payload.topics.map((t) => t.partitions))}`));
        consumer.on(GROUP_JOIN, ({ payload }) => console.error(`${new Date().toISOString()} ${name} joined gen ${payload.groupGenerationId}: ${JSON.stringify(payload.memberAssignment)}`));
      }
      await consumer.connect();
      await consumer.subscribe({ topic: e.topic, fromBeginning: true });
      await consumer.run({
        autoCommitInterval: 300,
        eachBatchAutoResolve: false,
        eachBatch: async ({ batch, resolveOffset, heartbeat, commitOffsetsIfNecessary, isRunning, isStale }) => {
          const stop = () => closing || !isRunning() || isStale();
          if (process.env.E2E_DEBUG === '1') console.error(`${new Date().toISOString()} ${name} batch p${batch.partition} ${batch.firstOffset()}..${batch.lastOffset()}`);
          for (const m of batch.messages) {
            const ok = await admit(t, stop, async () => {
              await heartbeat();
              await commitOffsetsIfNecessary();
            });
            if (!ok) return;
            t.consumed(name, batch.partition, Number(m.offset), m.key, m.value);
            resolveOffset(m.offset);
          }
          await commitOffsetsIfNecessary();
        },
      });
      return {
        async close() {
          closing = true;
          // disconnect stops the runner, commits the resolved offsets and leaves the group.
          await consumer.disconnect();
        },
      };
    },

    // listGroups: kafkajs returns protocol types, not states.
    async listGroups() {
      const { groups } = await admin.listGroups();
      return new Map(groups.map((g) => [g.groupId, '']));
    },

    async describeGroup(group) {
      const { groups } = await admin.describeGroups([group]);
      if (groups.length !== 1) throw new Error(`DescribeGroups returned ${groups.length} groups`);
      const g = groups[0];
      if (g.errorCode) {
        const err = new Error(`DescribeGroups error ${g.errorCode}`);
        err.code = g.errorCode;
        throw err;
      }
      let assigned = 0;
      for (const m of g.members) {
        const a = m.memberAssignment && m.memberAssignment.length ? AssignerProtocol.MemberAssignment.decode(m.memberAssignment) : null;
        if (a && Object.values(a.assignment).some((ps) => ps.length > 0)) assigned++;
      }
      return { state: g.state, protocol: g.protocol, members: g.members.length, assigned };
    },

    async fetchOffsets(group, topic) {
      const res = await admin.fetchOffsets({ groupId: group, topics: [topic] });
      const out = new Map();
      for (const t of res) {
        if (t.topic !== topic) continue;
        for (const p of t.partitions) if (Number(p.offset) >= 0) out.set(p.partition, Number(p.offset));
      }
      return out;
    },

    async commitOffsets(group, topic, offsets) {
      await admin.setOffsets({ groupId: group, topic, partitions: [...offsets].map(([partition, o]) => ({ partition, offset: String(o) })) });
    },

    async deleteOffsets() {
      throw new Unsupported('kafkajs 2.2.4 admin has no OffsetDelete');
    },

    async deleteGroup(group) {
      await admin.deleteGroups([group]);
    },

    partitions: () => partitions,
  };
}

main('kafkajs', newClient);
