'use strict';
/*
 * Run by tests/broker/v2/test_official_client_tls.py with the OFFICIAL RocketMQ Node.js client
 * (npm rocketmq-client-nodejs@1.0.8) over TLS: `sslEnabled: true` on a Producer and a
 * SimpleConsumer. The client passes no CA of its own (grpc-js `createSsl()`): the test points
 * GRPC_DEFAULT_SSL_ROOTS_FILE_PATH at the broker's certificate.
 *
 *   node tls.js ENDPOINT TOPIC GROUP   -> one JSON object on the last stdout line
 */

const { format } = require('node:util');
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const logger = {
  info: (...args) => console.error(`INFO ${format(...args)}`),
  warn: (...args) => console.error(`WARN ${format(...args)}`),
  error: (...args) => console.error(`ERROR ${format(...args)}`),
};
const COUNT = 4;

async function main() {
  const [ endpoint, topic, group ] = process.argv.slice(2);
  const base = { endpoints: endpoint, namespace: '', logger, sslEnabled: true };
  const producer = new Producer({ ...base, topics: [ topic ] });
  await producer.startup();
  const sent = [];
  try {
    for (let i = 0; i < COUNT; i++) {
      const receipt = await producer.send({ topic, body: Buffer.from(`node-tls-${i}`), tag: 'TLS' });
      sent.push(receipt.messageId);
    }
  } finally {
    await producer.shutdown();
  }
  const consumer = new SimpleConsumer({
    ...base, consumerGroup: group, subscriptions: new Map([[ topic, '*' ]]), awaitDuration: 5000,
  });
  await consumer.startup();
  const received = [];
  try {
    const deadline = Date.now() + 30000;
    while (received.length < COUNT && Date.now() < deadline) {
      for (const m of await consumer.receive(32, 30000)) {
        await consumer.ack(m);
        received.push({ id: m.messageId, body: m.body.toString(), tag: m.tag });
      }
    }
  } finally {
    await consumer.shutdown();
  }
  console.log(JSON.stringify({ sent, received }));
}

main().then(() => process.exit(0), err => {
  console.error(err);
  process.exit(1);
});
