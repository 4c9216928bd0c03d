'use strict';
// Drives the RocketMQ 4.x Node.js client ali-ons against Wharf's remoting port (its NameServer
// too); run by tests/broker/remoting/test_node_client.py as
//
//   node scenario.js NAMESRV_ADDR SCENARIO JSON_ARGS
//
// Scenarios:
//   send     a Producer sends args.messages one by one (awaited: sync sends), each
//            {body, tags, keys: [..], props: {..}, shardingKey?}; prints {sent: [{msgId,
//            sendStatus, queueId, queueOffset}], error}
//   consume  a push Consumer subscribes args.topic with args.expression ('*' or tags) and
//            collects messages until every body of args.bodies has arrived (and each body of
//            args.failOnce twice: its handler throws the first time), then args.settleMs more;
//            args.sendAfterReady messages are sent by a Producer once the consumer is ready.
//            Prints {received: [{body, topic, tags, keys, props, reconsumeTimes, queueId,
//            queueOffset, msgId}], sent: [...], error}
// The last stdout line is the JSON result; the client's own log goes to stderr.

const { Producer, Consumer, Message } = require('ali-ons');

const [namesrv, scenario, rawArgs] = process.argv.slice(2);
const args = JSON.parse(rawArgs || '{}');

// ali-ons asserts an http client even when nameSrv is given (it is only used for onsAddr).
const httpclient = {};
const logger = {
  info: (...a) => console.error('INFO', ...a),
  warn: (...a) => console.error('WARN', ...a),
  error: (...a) => console.error('ERROR', ...a),
  debug() {},
};
// ONS-style credentials: ali-ons signs every request with them (AccessKey, Signature,
// OnsChannel extFields); a broker without ACL ignores them.
const credentials = args.accessKey ? { accessKeyId: args.accessKey, accessKeySecret: args.secretKey } : {};

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

function messageOf(topic, spec) {
  const msg = new Message(topic, spec.tags || null, spec.body);
  if (spec.keys && spec.keys.length) msg.keys = spec.keys;
  for (const [name, value] of Object.entries(spec.props || {})) msg.properties[name] = value;
  if (spec.shardingKey) msg.shardingKey = spec.shardingKey;
  return msg;
}

async function sendAll(producer, topic, specs) {
  const sent = [];
  for (const spec of specs) {
    const r = await producer.send(messageOf(topic, spec));
    sent.push({
      body: spec.body,
      msgId: r.msgId,
      sendStatus: r.sendStatus,
      queueId: Number(r.messageQueue.queueId),
      queueOffset: Number(r.queueOffset),
    });
  }
  return sent;
}

function newProducer(group) {
  return new Producer({ httpclient, logger, nameSrv: namesrv, producerGroup: group, ...credentials });
}

async function send() {
  const producer = newProducer(args.group);
  await withTimeout(producer.ready(), 30000, 'producer.ready()');
  try {
    return { sent: await sendAll(producer, args.topic, args.messages), error: null };
  } finally {
    await withTimeout(producer.close(), 10000, 'producer.close()').catch(e => logger.warn(e));
  }
}

function view(msg) {
  return {
    body: msg.body.toString(),
    topic: msg.topic,
    tags: msg.tags || null,
    keys: msg.keys || null,
    props: msg.properties,
    reconsumeTimes: msg.reconsumeTimes,
    queueId: msg.queueId,
    queueOffset: Number(msg.queueOffset),
    msgId: msg.msgId,
  };
}

async function consume() {
  const expected = new Set(args.bodies || []);
  const failOnce = new Set(args.failOnce || []);
  const failed = new Set();
  const received = [];
  const errors = [];
  let done;
  const finished = new Promise(resolve => { done = resolve; });
  const complete = () => {
    const bodies = new Set(received.map(m => m.body));
    for (const body of expected) if (!bodies.has(body)) return false;
    for (const body of failOnce) {
      if (received.filter(m => m.body === body).length < 2) return false;
    }
    return true;
  };

  const consumer = new Consumer({
    httpclient,
    logger,
    nameSrv: namesrv,
    consumerGroup: args.group,
    persistent: true,
    rebalanceInterval: 3000,
    persistConsumerOffsetInterval: 1000,
    ...credentials,
  });
  // close() clears ali-ons' process-queue table first, so a rebalance tick during close reads
  // every queue's offset again and close() then cuts those reads ("The socket was closed"):
  // what the consumer reports once close() has begun is shutdown noise, kept apart.
  const closeErrors = [];
  let closing = false;
  consumer.on('error', err => (closing ? closeErrors : errors).push(String(err && err.message || err)));
  consumer.subscribe(args.topic, args.expression || '*', async msg => {
    const seen = view(msg);
    received.push(seen);
    if (failOnce.has(seen.body) && !failed.has(seen.body)) {
      failed.add(seen.body);
      throw new Error(`fail once: ${seen.body}`);
    }
    if (complete()) done();
  });
  await withTimeout(consumer.ready(), 30000, 'consumer.ready()');

  let sent = [];
  if (args.sendAfterReady && args.sendAfterReady.length) {
    const producer = newProducer(args.producerGroup || `${args.group}_P`);
    await withTimeout(producer.ready(), 30000, 'producer.ready()');
    sent = await sendAll(producer, args.topic, args.sendAfterReady);
    await withTimeout(producer.close(), 10000, 'producer.close()').catch(e => logger.warn(e));
  }
  if (complete()) done();
  let error = null;
  try {
    await withTimeout(finished, (args.timeout || 60) * 1000, 'receiving every message');
    await new Promise(resolve => setTimeout(resolve, args.settleMs || 0));
  } catch (err) {
    error = String(err.message);
  }
  closing = true;
  await withTimeout(consumer.close(), 10000, 'consumer.close()').catch(e => logger.warn(e));
  return { received, sent, error, clientErrors: errors.slice(0, 20), closeErrors: closeErrors.slice(0, 20) };
}

(async () => {
  const scenarios = { send, consume };
  if (!scenarios[scenario]) throw new Error(`unknown scenario ${scenario}`);
  const out = await scenarios[scenario]();
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
})().catch(err => {
  console.error(err && err.stack || err);
  process.stdout.write(JSON.stringify({ error: String(err && err.message || err) }) + '\n');
  process.exit(1);
});
