'use strict';
/*
 * Run by tests/broker/v2/test_node_client.py with the OFFICIAL RocketMQ Node.js client
 * (npm rocketmq-client-nodejs@1.0.8, installed here by `make rmq-client`: npm ci).
 *
 *   node scenarios.js ENDPOINT SCENARIO TOPIC GROUP   -> one JSON object on the last stdout line
 *
 * Scenarios (TOPIC is the normal topic; `produce` also uses TOPIC + "-fifo"):
 *   produce  5 sends awaited one by one (tag, 2 keys, 2 properties), 5 sent at once and awaited
 *            together, then 12 FIFO sends over message groups group-0..2 (awaited in order).
 *   simple   6 sends; a SimpleConsumer receives all 6 (invisible 30 s), acks 4, gives one 2 s
 *            more (ChangeInvisibleDuration) and leaves one invisible: only the first comes back,
 *            with delivery attempt 2; an ack with its old handle is refused.
 *   fifo     3 message groups x 4 FIFO sends; GROUP (a FIFO group) receives them in batches of
 *            up to 32, acking each batch; every batch is reported as received.
 *   delay    (a DELAY topic) one message for now + 2 s, one with delay 2 s recalled by its
 *            recall handle; the first is received with its delivery time, the second never.
 * A client is given one topic up front: with more, 1.0.8's startup can miss the broker's
 * (immediate) settings reply while it still queries the later routes, then waits forever.
 * The client logs to stderr (its default logger writes to ~/logs/rocketmq/).
 */

const { format } = require('node:util');
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const logger = {
  info: (...args) => console.error(`INFO ${format(...args)}`),
  warn: (...args) => console.error(`WARN ${format(...args)}`),
  error: (...args) => console.error(`ERROR ${format(...args)}`),
};

function options(endpoint, extra) {
  return { endpoints: endpoint, namespace: '', logger, ...extra };
}

function view(m) {
  return {
    id: m.messageId,
    body: m.body.toString(),
    tag: m.tag || null,
    keys: [ ...m.keys ].sort(),
    props: Object.fromEntries(m.properties),
    group: m.messageGroup || null,
    attempt: m.deliveryAttempt,
    corrupted: Boolean(m.corrupted),
  };
}

function errorOf(err) {
  return { type: err.constructor.name, code: err.code ?? null, message: String(err.message) };
}

async function withProducer(endpoint, topics, body) {
  const producer = new Producer(options(endpoint, { topics }));
  await producer.startup();
  try {
    return await body(producer);
  } finally {
    await producer.shutdown();
  }
}

async function withConsumer(endpoint, topic, group, awaitDuration, body) {
  const consumer = new SimpleConsumer(options(endpoint, {
    consumerGroup: group,
    subscriptions: new Map([[ topic, '*' ]]),
    awaitDuration,
  }));
  await consumer.startup();
  try {
    return await body(consumer);
  } finally {
    await consumer.shutdown();
  }
}

async function receiveUntil(consumer, want, invisibleMs, deadlineMs) {
  const got = [];
  const deadline = Date.now() + deadlineMs;
  while (got.length < want && Date.now() < deadline) {
    got.push(...await consumer.receive(32, invisibleMs));
  }
  return got;
}

async function produce(endpoint, topic) {
  const fifoTopic = `${topic}-fifo`;
  return withProducer(endpoint, [ topic ], async producer => {  // fifoTopic: routed on first send
    const sent = [];
    for (let i = 0; i < 5; i++) {
      const props = { order: String(i), region: 'eu-1' };
      const msg = {
        topic, body: Buffer.from(`sync-${i}`), tag: 'TagA', keys: [ `k${i}`, 'shared' ],
        properties: new Map(Object.entries(props)),
      };
      const receipt = await producer.send(msg);
      sent.push({ id: receipt.messageId, body: `sync-${i}`, tag: 'TagA', keys: msg.keys, props });
    }
    const pending = [];
    for (let i = 0; i < 5; i++) {
      const props = { async: 'yes', n: String(i) };
      const msg = {
        topic, body: Buffer.from(`async-${i}`), tag: 'TagB', keys: [ `a${i}` ],
        properties: new Map(Object.entries(props)),
      };
      pending.push(producer.send(msg).then(receipt => (
        { id: receipt.messageId, body: `async-${i}`, tag: 'TagB', keys: msg.keys, props })));
    }
    sent.push(...await Promise.all(pending));
    const fifo = [];
    for (let i = 0; i < 12; i++) {
      const group = `group-${i % 3}`;
      const receipt = await producer.send({
        topic: fifoTopic, body: Buffer.from(`fifo-${i}`), tag: 'F', messageGroup: group,
      });
      fifo.push({ id: receipt.messageId, body: `fifo-${i}`, group });
    }
    return { sent, fifo };
  });
}

async function simple(endpoint, topic, group) {
  const sent = await withProducer(endpoint, [ topic ], async producer => {
    const ids = [];
    for (let i = 0; i < 6; i++) {
      const receipt = await producer.send({
        topic, body: Buffer.from(`pop-${i}`), tag: i % 2 === 0 ? 'TagA' : 'TagB',
        keys: [ `key-${i}` ], properties: new Map([[ 'n', String(i) ]]),
      });
      ids.push(receipt.messageId);
    }
    return ids;
  });
  return withConsumer(endpoint, topic, group, 5000, async consumer => {
    const out = { sent };
    const first = await receiveUntil(consumer, 6, 30000, 30000);
    out.first = first.map(view);
    const byBody = new Map(first.map(m => [ m.body.toString(), m ]));
    // pop-0, 1, 4, 5 acked; pop-2 gets 2 s more and is not acked; pop-3 keeps its 30 s.
    for (const body of [ 'pop-0', 'pop-1', 'pop-4', 'pop-5' ]) {
      await consumer.ack(byBody.get(body));
    }
    const changed = byBody.get('pop-2');
    const stale = changed.receiptHandle;
    await consumer.changeInvisibleDuration(changed, 2000);
    out.handle_changed = Boolean(changed.receiptHandle) && changed.receiptHandle !== stale;
    const again = await receiveUntil(consumer, 1, 30000, 15000);
    out.again = again.map(view);
    for (const m of again) {
      await consumer.ack(m);
    }
    // The handle of the delivery before the change is refused.
    changed.receiptHandle = stale;
    try {
      await consumer.ack(changed);
      out.stale_ack = null;
    } catch (err) {
      out.stale_ack = errorOf(err);
    }
    out.after = (await consumer.receive(32, 30000)).map(view);
    return out;
  });
}

async function fifo(endpoint, topic, group) {
  const bodies = [];
  for (let i = 0; i < 4; i++) {
    for (const g of [ 'a', 'b', 'c' ]) bodies.push(`${g}-${i}`);
  }
  const sent = await withProducer(endpoint, [ topic ], async producer => {
    const ids = [];
    for (const body of bodies) {
      const receipt = await producer.send({
        topic, body: Buffer.from(body), messageGroup: body.split('-')[0],
      });
      ids.push(receipt.messageId);
    }
    return ids;
  });
  return withConsumer(endpoint, topic, group, 3000, async consumer => {
    const batches = [];
    const deadline = Date.now() + 60000;
    let count = 0;
    while (count < bodies.length && Date.now() < deadline) {
      const got = await consumer.receive(32, 30000);
      if (!got.length) continue;
      batches.push(got.map(m => [ m.messageGroup, m.body.toString(), m.deliveryAttempt ]));
      count += got.length;
      for (const m of got) await consumer.ack(m);
    }
    return { sent, batches };
  });
}

async function delay(endpoint, topic, group) {
  const deliverAt = new Date(Date.now() + 2000);
  const sent = await withProducer(endpoint, [ topic ], async producer => {
    const later = await producer.send({ topic, body: Buffer.from('later'), deliveryTimestamp: deliverAt });
    const gone = await producer.send({ topic, body: Buffer.from('recalled'), delay: 2000 });
    const recalled = await producer.recallMessage(topic, gone.recallHandle);
    return { later: later.messageId, recalled: recalled.messageId, recall_handle: gone.recallHandle };
  });
  return withConsumer(endpoint, topic, group, 3000, async consumer => {
    const got = await receiveUntil(consumer, 1, 30000, 20000);
    const receivedAt = Date.now();
    for (const m of got) await consumer.ack(m);
    const after = await receiveUntil(consumer, 1, 30000, 4000);  // the recalled one never comes
    return {
      sent,
      deliver_at: deliverAt.getTime(),
      received_at: receivedAt,
      got: got.map(m => ({ ...view(m), delivery_timestamp: m.deliveryTimestamp?.getTime() ?? null })),
      after: after.map(view),
    };
  });
}

const SCENARIOS = { produce, simple, fifo, delay };

async function main() {
  const [ endpoint, scenario, topic, group ] = process.argv.slice(2);
  const run = SCENARIOS[scenario];
  if (!run || !topic) {
    console.error(`usage: node scenarios.js ENDPOINT {${Object.keys(SCENARIOS).join('|')}} TOPIC GROUP`);
    process.exit(2);
  }
  const out = await run(endpoint, topic, group);
  console.log(JSON.stringify(out));
}

main().then(() => process.exit(0), err => {
  console.error('FAILED', err);
  process.exit(1);
});
