'use strict';
// kafkajs 2.2.4 (pure JS) through the scenario of tests/broker/kafka/clients/scenario.py, run by
// tests/broker/kafka/test_clients_kafkajs.py as
//
//   node driver.js SPEC_JSON
//
// admin.createTopics; one producer.send per codec of the spec (kafkajs has only gzip built in:
// snappy, lz4 and zstd need codec plugins), acks -1 (all), explicit partitions, headers as an
// object whose duplicate key carries an array of values; each send's baseOffset per partition
// gives every record's offset. Members A, B, C are consumers of one group (fromBeginning,
// autoCommit off, explicit commitOffsets of the next offset), their assignment seen through the
// GROUP_JOIN and REBALANCING events; admin.fetchOffsets reads the committed offsets. A member
// leaves with consumer.disconnect() (LeaveGroup).
// The result is the stdout line starting with "WHARF-KAFKA-RESULT "; kafkajs logs go to stderr.

const { Kafka, logLevel, CompressionTypes } = require('kafkajs');

const RESULT_MARK = 'WHARF-KAFKA-RESULT ';
const spec = JSON.parse(process.argv[2]);
const T0 = Date.now();
const note = what => process.stderr.write(`[driver ${((Date.now() - T0) / 1000).toFixed(2)} s] ${what}\n`);
const unhex = h => (h === null ? null : Buffer.from(h, 'hex'));
const hex = b => (b === null || b === undefined ? null : Buffer.from(b).toString('hex'));
const byNumber = (a, b) => a - b;
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP };

const kafka = new Kafka({
  clientId: 'wharf-kafkajs-driver',
  brokers: [spec.bootstrap],
  logLevel: logLevel.WARN,
  logCreator: () => ({ namespace, level, log }) =>
    process.stderr.write(`kafkajs ${level} ${namespace}: ${JSON.stringify(log)}\n`),
  retry: { initialRetryTime: 100, retries: 8 },
});

function bounded(promise, seconds, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer in ${seconds} s`)), seconds * 1000);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function until(what, seconds, done, detail) {
  const end = Date.now() + seconds * 1000;
  while (!done()) {
    if (Date.now() > end) throw new Error(`${what}: not done after ${seconds} s (${detail()})`);
    await sleep(50);
  }
}

class Member {
  constructor(name, current) {
    this.name = name;
    this.current = current;
    this.consumer = kafka.consumer({
      groupId: spec.group,
      sessionTimeout: 6000,
      rebalanceTimeout: 20000,
      heartbeatInterval: 500,
      maxWaitTimeInMs: 250,
      metadataMaxAge: 2000,
      retry: { initialRetryTime: 100, retries: 8 },
    });
    const { GROUP_JOIN, REBALANCING, CRASH } = this.consumer.events;
    this.consumer.on(GROUP_JOIN, e => {
      current.live[name] = (e.payload.memberAssignment[spec.topic] || []).slice().sort(byNumber);
    });
    this.consumer.on(REBALANCING, () => {
      current.live[name] = [];
    });
    this.consumer.on(CRASH, e => {
      this.failure = e.payload.error;
    });
  }

  async start() {
    await bounded(this.consumer.connect(), spec.timeouts.join, `${this.name} connect`);
    await this.consumer.subscribe({ topics: [spec.topic], fromBeginning: true });
    await bounded(this.consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        const offset = Number(message.offset);
        const headers = [];
        for (const [name, value] of Object.entries(message.headers || {})) {
          for (const v of Array.isArray(value) ? value : [value]) headers.push([name, hex(v)]);
        }
        this.current.phase.records.push({
          member: this.name,
          partition,
          offset,
          key: hex(message.key),
          value: hex(message.value),
          headers,
        });
      },
    }), spec.timeouts.join, `${this.name} run`);
    return this;
  }

  check() {
    if (this.failure) throw new Error(`member ${this.name} crashed: ${this.failure}`);
  }

  async commit() {
    // The offset after the last record this member received in this phase, per partition.
    const next = {};
    for (const r of this.current.phase.records) {
      if (r.member === this.name) next[r.partition] = Math.max(next[r.partition] || 0, r.offset + 1);
    }
    const offsets = Object.entries(next).map(([p, o]) => ({ topic: spec.topic, partition: Number(p), offset: String(o) }));
    if (offsets.length) await bounded(this.consumer.commitOffsets(offsets), spec.timeouts.commit, 'commitOffsets');
  }

  async close() {
    await bounded(this.consumer.disconnect(), spec.timeouts.commit, `${this.name} disconnect`);
    delete this.current.live[this.name];
  }
}

function split(live, names) {
  const held = names.map(n => (live[n] || []).slice().sort(byNumber));
  const all = held[0].concat(held[1]).sort(byNumber);
  return held.every(h => h.length === 1) && all.length === spec.partitions && all.every((p, i) => p === i);
}

async function waitSplit(members, names, current) {
  await until(
    `members ${names} splitting the partitions`,
    spec.timeouts.join,
    () => {
      members.forEach(m => m.check());
      return split(current.live, names);
    },
    () => `assignments ${JSON.stringify(current.live)}`,
  );
  current.phase.members = Object.fromEntries(names.map(n => [n, current.live[n].slice()]));
}

async function consume(members, want, current) {
  await until(
    `receiving ${want} records`,
    spec.timeouts.consume,
    () => {
      members.forEach(m => m.check());
      return current.phase.records.length >= want;
    },
    () => `got ${current.phase.records.length}`,
  );
  await sleep(300); // a moment more: duplicates would show up now
}

async function produce(records, result) {
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await bounded(producer.connect(), spec.timeouts.join, 'producer connect');
  try {
    for (const codec of [...new Set(records.map(r => r.codec))]) {
      const recs = records.filter(r => r.codec === codec);
      const messages = recs.map(r => {
        const headers = {};
        for (const [name, value] of r.headers) {
          const v = unhex(value);
          headers[name] = name in headers ? [].concat(headers[name], [v]) : v;
        }
        return { key: unhex(r.key), value: unhex(r.value), partition: r.partition, headers };
      });
      const send = producer.send({ topic: spec.topic, acks: -1, compression: CODECS[codec], messages });
      const meta = await bounded(send, spec.timeouts.consume, `produce (${codec})`);
      const base = Object.fromEntries(meta.map(m => [m.partition, Number(m.baseOffset)]));
      const index = {};
      for (const r of recs) {
        index[r.partition] = (index[r.partition] || 0) + 1;
        result.delivered.push({ id: r.id, partition: r.partition, offset: base[r.partition] + index[r.partition] - 1 });
      }
    }
  } finally {
    await bounded(producer.disconnect(), spec.timeouts.commit, 'producer disconnect');
  }
}

async function committed(admin) {
  const fetch = admin.fetchOffsets({ groupId: spec.group, topics: [spec.topic] });
  const [topic] = await bounded(fetch, spec.timeouts.commit, 'fetchOffsets');
  return Object.fromEntries(topic.partitions.map(p => [String(p.partition), Number(p.offset)]));
}

async function main() {
  const result = { created: false, delivered: [], phases: [], error: null };
  const current = { phase: { members: {}, records: [], committed: {} }, live: {} };
  const members = [];
  const admin = kafka.admin();
  try {
    await bounded(admin.connect(), spec.timeouts.join, 'admin connect');
    const create = admin.createTopics({
      topics: [{ topic: spec.topic, numPartitions: spec.partitions, replicationFactor: 1 }],
      waitForLeaders: true,
    });
    const created = await bounded(create, spec.timeouts.join, 'createTopics');
    if (!created) throw new Error(`createTopics: ${spec.topic} exists already`);
    result.created = true;
    note('topic created');
    result.phases.push(current.phase);
    const a = new Member('A', current);
    const b = new Member('B', current);
    members.push(a, b);
    await Promise.all(members.map(m => m.start()));
    await waitSplit(members, ['A', 'B'], current);
    note(`A and B split the partitions: ${JSON.stringify(current.phase.members)}`);
    await produce(spec.batches[0], result);
    note('batch 0 produced');
    await consume(members, spec.batches[0].length, current);
    note('batch 0 consumed');
    for (const m of members) await m.commit();
    current.phase.committed = await committed(admin);

    members.splice(members.indexOf(b), 1);
    await b.close();
    current.phase = { members: {}, records: [], committed: {} };
    result.phases.push(current.phase);
    const c = new Member('C', current);
    members.push(c);
    await c.start();
    note('B left, C joined');
    await waitSplit(members, ['A', 'C'], current);
    note(`A and C split the partitions: ${JSON.stringify(current.phase.members)}`);
    await produce(spec.batches[1], result);
    note('batch 1 produced');
    await consume(members, spec.batches[1].length, current);
    note('batch 1 consumed');
    for (const m of members) await m.commit();
    current.phase.committed = await committed(admin);
  } catch (e) {
    result.error = `${e && e.stack ? e.stack : e}`;
  } finally {
    for (const m of members) await bounded(m.consumer.disconnect(), 10, 'disconnect').catch(() => {});
    await bounded(admin.disconnect(), 10, 'admin disconnect').catch(() => {});
  }
  process.stdout.write(RESULT_MARK + JSON.stringify(result) + '\n');
}

main().then(
  () => process.exit(0),
  e => {
    process.stderr.write(`driver crashed: ${e && e.stack}\n`);
    process.exit(1);
  },
);
