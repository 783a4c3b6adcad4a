'use strict';
// The e2e scenario for the node clients, step for step the one of e2e/scenario (Go): produce,
// consume in a group of three through a leave, a join and a broker restart, check nothing was
// lost and the commits reached the log end, then administer the empty group to its deletion.
// A client is an object with async methods; an admin method the library lacks throws
// Unsupported, and the step is named as skipped in the PASS line, or as done by the Go
// helper e2e/clients/check when the client has helperAdmin (and waitGroup, to pace the
// group without DescribeGroups).

const { execFile } = require('node:child_process');

class Unsupported extends Error {}

function env(client) {
  const int = (k, d) => parseInt(process.env[k] || '', 10) || d;
  return {
    brokers: (process.env.E2E_BROKERS || '127.0.0.1:9092').split(','),
    topic: process.env.E2E_TOPIC || `e2e-${client}`,
    group: process.env.E2E_GROUP || `e2e-${client}-group`,
    records: int('E2E_RECORDS', 10000),
    partitions: int('E2E_PARTITIONS', 6),
    restart: process.env.E2E_RESTART || '',
    timeoutMs: int('E2E_TIMEOUT_S', 100) * 1000,
  };
}

const pad = (i) => String(i).padStart(5, '0');
const key = (i) => `k-${pad(i)}`;
const value = (i) => `v-${pad(i)}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Tracker: every consumed record, the gate that paces the members, the final proof.
class Tracker {
  constructor(records, end) {
    this.records = records;
    this.end = end; // Map partition -> end offset
    this.gate = 0;
    this.at = new Map(); // "p/o" -> index
    this.index = new Array(records).fill(null);
    this.unique = 0;
    this.total = 0;
    this.members = {};
    this.err = null;
  }

  open(gate) { this.gate = gate; }

  admitted() { return this.unique < this.gate; }

  consumed(member, partition, offset, k, v) {
    const ks = k == null ? '' : k.toString();
    const vs = v == null ? '' : v.toString();
    let err = null;
    const i = parseInt(vs.slice(2), 10);
    const pos = `${partition}/${offset}`;
    if (!vs.startsWith('v-') || ks !== `k-${vs.slice(2)}` || Number.isNaN(i)) err = `record key ${ks} does not match value ${vs}`;
    else if (i < 0 || i >= this.records) err = `record index ${i} out of range`;
    else if (this.at.has(pos) && this.at.get(pos) !== i) err = `partition ${partition} offset ${offset} gave record ${i}, earlier record ${this.at.get(pos)}`;
    else if (this.index[i] !== null && this.index[i] !== pos) err = `record ${i} at ${pos}, earlier at ${this.index[i]} (produced twice?)`;
    if (err) {
      this.err = this.err || `member ${member}: ${err}`;
      return;
    }
    this.total++;
    this.members[member] = (this.members[member] || 0) + 1;
    if (this.index[i] === null) {
      this.index[i] = pos;
      this.at.set(pos, i);
      this.unique++;
    }
  }

  async wait(n, deadline) {
    while (this.unique < n) {
      if (this.err) throw new Error(this.err);
      if (Date.now() > deadline) throw new Error(`waiting for ${n} distinct records: only ${this.unique} consumed (${this.stats()})`);
      await sleep(10);
    }
    if (this.err) throw new Error(this.err);
  }

  frontier() {
    const f = new Map();
    for (const [p, end] of this.end) {
      let o = 0;
      while (o < end && this.at.has(`${p}/${o}`)) o++;
      f.set(p, o);
    }
    return f;
  }

  check() {
    if (this.err) throw new Error(this.err);
    const missing = [];
    for (const [p, end] of this.end) {
      for (let o = 0; o < end; o++) if (!this.at.has(`${p}/${o}`)) missing.push(`${p}/${o}`);
    }
    if (missing.length) throw new Error(`${missing.length} records never consumed (partition/offset: ${missing.slice(0, 10).join(' ')})`);
    if (this.unique !== this.records) throw new Error(`${this.unique} distinct records consumed, want ${this.records}`);
  }

  stats() {
    const per = Object.keys(this.members).sort().map((m) => `${m}=${this.members[m]}`).join(' ');
    return `${this.unique} distinct, ${this.total - this.unique} duplicates, by member ${per}`;
  }
}

// admit waits until the gate lets the member consume; stop() true means give up (the member
// is closing or its batch went stale). tick runs while waiting (heartbeat, commit).
async function admit(tracker, stop, tick) {
  let last = Date.now();
  while (!tracker.admitted()) {
    if (stop()) return false;
    if (tick && Date.now() - last > 250) {
      last = Date.now();
      await tick();
    }
    await sleep(5);
  }
  return !stop();
}

const mapEqual = (a, b) => a.size === b.size && [...a].every(([k, v]) => b.get(k) === v);
const show = (m) => `map[${[...m].sort((x, y) => x[0] - y[0]).map(([k, v]) => `${k}:${v}`).join(' ')}]`;
const isGroupNotFound = (e) => e && (e.type === 'GROUP_ID_NOT_FOUND' || e.code === 69 || /GROUP_ID_NOT_FOUND|group id does not exist/i.test(String(e.message)));

function restartBroker(e) {
  if (!e.restart) return Promise.resolve();
  return new Promise((resolve, reject) => {
    execFile('sh', ['-c', e.restart], (err, stdout, stderr) => (err ? reject(new Error(`restart broker: ${err.message}: ${stderr}`)) : resolve()));
  });
}

async function retry(deadline, fn) {
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(100);
    }
  }
}

async function waitGroup(c, e, state, members, deadline) {
  // A client without DescribeGroups waits through the Go helper instead: the events of the
  // scenario must still happen on a Stable group whose members all hold partitions.
  if (c.waitGroup) return c.waitGroup(e.group, state, members, deadline);
  let last = null;
  let lastErr = null;
  for (;;) {
    try {
      last = await c.describeGroup(e.group);
      lastErr = null;
      if (last.state === state && last.members === members && (last.assigned < 0 || last.assigned === members)) return;
    } catch (err) {
      if (err instanceof Unsupported) return;
      lastErr = err;
    }
    if (Date.now() > deadline) {
      if (lastErr) throw new Error(`describe group ${e.group}: ${lastErr.message}`);
      throw new Error(`describe group ${e.group}: state ${last.state} with ${last.members} members (${last.assigned} assigned), want ${state} with ${members}, all assigned`);
    }
    await sleep(100);
  }
}

async function settle(c, e, t) {
  const deadline = Date.now() + 3000;
  const frontier = t.frontier();
  let committed = new Map();
  for (;;) {
    let behind = false;
    try {
      committed = await c.fetchOffsets(e.group, e.topic);
    } catch (err) {
      behind = true;
    }
    for (const [p, o] of frontier) if ((committed.get(p) || 0) < o) behind = true;
    if (!behind) return;
    if (Date.now() > deadline) {
      console.error(`e2e: ${t.stats()}; consumed up to ${show(frontier)}, committed only ${show(committed)}`);
      return;
    }
    await sleep(50);
  }
}

async function consume(c, e, t, end, deadline) {
  const n = e.records;
  const members = new Map();
  const join = async (id) => members.set(id, await c.newMember(id, t));
  const leave = async (id) => {
    const m = members.get(id);
    members.delete(id);
    await m.close();
  };
  // The last step opens the gate for good: a member redelivered records after a rebalance
  // must process them again even once every record was seen once.
  const step = async (gate) => {
    t.open(gate >= n ? Infinity : gate);
    await t.wait(gate, deadline);
    await settle(c, e, t);
  };
  try {
    for (const id of [0, 1, 2]) await join(id);
    await waitGroup(c, e, 'Stable', 3, deadline);
    await step(n / 4);
    await leave(0);
    await waitGroup(c, e, 'Stable', 2, deadline).catch((err) => { throw new Error(`after member 0 left: ${err.message}`); });
    await step(n / 2);
    await join(3);
    await waitGroup(c, e, 'Stable', 3, deadline).catch((err) => { throw new Error(`after member 3 joined: ${err.message}`); });
    await step((3 * n) / 4);
    const before = await c.fetchOffsets(e.group, e.topic);
    await restartBroker(e);
    const after = await retry(Math.min(deadline, Date.now() + 20000), () => c.fetchOffsets(e.group, e.topic));
    for (const [p, o] of before) {
      if ((after.get(p) || 0) < o) throw new Error(`committed offsets went back across the broker restart: before ${show(before)}, after ${show(after)}`);
    }
    await step(n);
    const commitDeadline = Math.min(deadline, Date.now() + 30000);
    for (;;) {
      const got = await c.fetchOffsets(e.group, e.topic).catch(() => new Map());
      if (mapEqual(got, end)) break;
      if (Date.now() > commitDeadline) throw new Error(`all records consumed (${t.stats()}), but committed offsets ${show(got)}, want the log end ${show(end)}`);
      await sleep(100);
    }
    for (const id of [...members.keys()].sort()) await leave(id);
  } finally {
    for (const m of members.values()) await m.close().catch(() => {});
  }
  t.check();
  const got = await c.fetchOffsets(e.group, e.topic);
  if (!mapEqual(got, end)) throw new Error(`after every member left: committed offsets ${show(got)}, want the log end ${show(end)}`);
  return t.stats();
}

async function administer(c, e, end, notes) {
  const skipped = {};
  const attempt = async (what, fn) => {
    try {
      await fn();
      return true;
    } catch (err) {
      if (err instanceof Unsupported) {
        skipped[what] = err.message;
        return false;
      }
      throw new Error(`${what}: ${err.message}`);
    }
  };
  const g = e.group;
  await attempt('list groups', async () => {
    const groups = await c.listGroups();
    if (!groups.has(g)) throw new Error(`${g} missing from ${[...groups.keys()]}`);
    const state = groups.get(g);
    if (state && state !== 'Empty') throw new Error(`${g} is ${state}, want Empty`);
  });
  await attempt('describe group', async () => {
    const d = await c.describeGroup(g);
    if (d.state !== 'Empty' || d.members !== 0) throw new Error(`${d.state} with ${d.members} members, want Empty with 0`);
  });
  const zero = new Map([...end.keys()].map((p) => [p, 0]));
  await attempt('reset offsets', async () => {
    await c.commitOffsets(g, e.topic, zero);
    const got = await c.fetchOffsets(g, e.topic);
    if (!mapEqual(got, zero)) throw new Error(`offsets after reset: ${show(got)}, want ${show(zero)}`);
  });
  await attempt('delete offsets', async () => {
    await c.deleteOffsets(g, e.topic, [0]);
    const got = await c.fetchOffsets(g, e.topic);
    if (got.has(0) || got.size !== end.size - 1) throw new Error(`offsets after deleting partition 0: ${show(got)}, want every partition but 0`);
  });
  await attempt('delete group', async () => {
    await c.deleteGroup(g);
    try {
      const groups = await c.listGroups();
      if (groups.has(g)) throw new Error(`list groups after delete: ${g} still listed`);
    } catch (err) {
      if (!(err instanceof Unsupported)) throw err;
    }
    try {
      const d = await c.describeGroup(g);
      if (d.state !== 'Dead' || d.members !== 0) throw new Error(`describe group after delete: ${d.state} with ${d.members} members, want Dead`);
    } catch (err) {
      if (!(err instanceof Unsupported) && !isGroupNotFound(err)) throw err;
    }
    try {
      const got = await c.fetchOffsets(g, e.topic);
      if (got.size !== 0) throw new Error(`offsets after delete group: ${show(got)}, want none`);
    } catch (err) {
      // Apache answers OffsetFetch of an unknown group with no offsets and no error.
      if (!isGroupNotFound(err)) throw err;
      notes.push('OffsetFetch of the deleted group answered GROUP_ID_NOT_FOUND where Apache answers no offsets');
    }
  });
  return skipped;
}

async function run(c, e) {
  const deadline = Date.now() + e.timeoutMs;
  const n = e.records;
  await c.createTopic(e.topic, e.partitions).catch((err) => { throw new Error(`create topic ${e.topic} with ${e.partitions} partitions: ${err.message}`); });
  await c.produce(e.topic, n).catch((err) => { throw new Error(`produce ${n} records: ${err.message}`); });
  const end = await c.endOffsets(e.topic);
  let sum = 0;
  for (const [p, o] of end) {
    if (o <= 0) throw new Error(`after produce: partition ${p} is empty (end offsets ${show(end)})`);
    sum += o;
  }
  if (end.size !== e.partitions || sum !== n) throw new Error(`after produce: end offsets ${show(end)}: ${end.size} partitions holding ${sum} records, want ${e.partitions} holding ${n}`);

  const t = new Tracker(n, end);
  let stats;
  try {
    stats = await consume(c, e, t, end, deadline);
  } catch (err) {
    throw new Error(`consume: ${err.message}`);
  }
  const notes = [];
  let skipped;
  try {
    skipped = await administer(c, e, end, notes);
  } catch (err) {
    throw new Error(`admin: ${err.message}`);
  }
  const steps = ['list groups', 'describe group', 'fetch offsets', 'reset offsets', 'delete offsets', 'delete group'];
  const done = steps.filter((st) => !(st in skipped));
  let why = steps.filter((st) => st in skipped).map((st) => `${st} (${skipped[st]})`);
  let helped = '';
  if (why.length && c.helperAdmin) {
    // The steps the library lacks are done by the Go helper (kadm), which runs the whole
    // admin sequence on the group: the client then checks the deletion with its own
    // OffsetFetch.
    try {
      helped = await c.helperAdmin();
      const got = await c.fetchOffsets(e.group, e.topic).catch((err) => {
        if (!isGroupNotFound(err)) throw err;
        notes.push('OffsetFetch of the deleted group answered GROUP_ID_NOT_FOUND where Apache answers no offsets');
        return new Map();
      });
      if (got.size !== 0) throw new Error(`offsets after the group was deleted: ${show(got)}, want none`);
    } catch (err) {
      throw new Error(`admin by the Go helper: ${err.message}`);
    }
    helped = `; ${steps.filter((st) => st in skipped).join(', ')} by the Go helper (${[...new Set(Object.values(skipped))].join('; ')}; its run: ${helped.replace(/^admin: /, '')})`;
    why = [];
  }
  let s = `${n} produced to ${e.partitions} partitions; consumed by a group through 1 leave, 1 join, ${e.restart ? '1 broker restart' : 'no broker restart (E2E_RESTART unset)'} (${stats}); committed = log end; admin: ${done.join(', ')}${helped}`;
  if (why.length) s += `; skipped: ${why.join('; ')}`;
  if (notes.length) s += `; note: ${notes.join('; ')}`;
  return s;
}

// main runs the scenario and prints the verdict line; newClient(env) builds the client.
async function main(name, newClient) {
  const e = env(name.split(' ')[0]);
  const start = Date.now();
  const secs = () => ((Date.now() - start) / 1000).toFixed(1);
  const timer = setTimeout(() => {
    console.log(`FAIL ${name}: no verdict within ${e.timeoutMs / 1000}s (after ${secs()}s)`);
    process.exit(1);
  }, e.timeoutMs + 2000);
  let c;
  let verifying = false;
  try {
    c = await newClient(e);
    const summary = await run(c, e);
    // verify: what the client saw beside the scenario's steps (librdkafka protocol errors).
    verifying = true;
    if (c.verify) await c.verify(false);
    console.log(`PASS ${name}: ${summary} (${secs()}s)`);
    process.exitCode = 0;
  } catch (err) {
    const more = c && c.verify && !verifying ? await c.verify(true).then(() => '', (v) => `; ${v.message}`) : '';
    console.log(`FAIL ${name}: ${err.message}${more} (after ${secs()}s)`);
    process.exitCode = 1;
  } finally {
    if (c && c.close) await c.close().catch(() => {});
    clearTimeout(timer);
  }
  // A client library may keep sockets or timers alive; the verdict is out.
  setTimeout(() => process.exit(), 100).unref();
}

module.exports = { Unsupported, key, value, sleep, admit, isGroupNotFound, main };
