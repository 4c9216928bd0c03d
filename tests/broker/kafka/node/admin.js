// kafkajs's admin client against a broker (test_admin_clients.py): node admin.js BOOTSTRAP TOPIC
// Creates TOPIC compacted, describes and alters its configs (AlterConfigs), adds partitions,
// deletes an unknown group; prints one JSON object of what came back (errors as their type).
const { Kafka, logLevel, ConfigResourceTypes } = require('kafkajs')

async function attempt (fn) {
  try {
    const value = await fn()
    return { ok: value === undefined ? true : value }
  } catch (e) {
    // kafkajs wraps per-topic and per-group errors: their types are what a broker answered
    const inner = (e.errors || e.groups || []).map(x => (x.error || x).type)
    return { error: e.type || e.name, inner, message: e.message }
  }
}

async function main () {
  const [bootstrap, topic] = process.argv.slice(2)
  const kafka = new Kafka({ brokers: [bootstrap], logLevel: logLevel.NOTHING, retry: { retries: 1 } })
  const admin = kafka.admin()
  await admin.connect()
  const out = {}
  out.created = await attempt(() => admin.createTopics({
    topics: [{ topic, numPartitions: 1, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }]
  }))
  out.refused = await attempt(() => admin.createTopics({
    topics: [{ topic: topic + '-x', configEntries: [{ name: 'message.timestamp.type', value: 'LogAppendTime' }] }]
  }))
  const describe = async () => {
    const res = await admin.describeConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['cleanup.policy', 'retention.ms'] }]
    })
    return Object.fromEntries(res.resources[0].configEntries.map(c => [c.configName, c.configValue]))
  }
  out.described = await attempt(describe)
  out.altered = await attempt(() => admin.alterConfigs({
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'retention.ms', value: '60000' }] }]
  }))
  out.describedAfter = await attempt(describe)
  out.partitions = await attempt(() => admin.createPartitions({ topicPartitions: [{ topic, count: 3 }] }))
  out.metadata = await attempt(async () => (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions.length)
  out.deletedGroups = await attempt(() => admin.deleteGroups(['nobody-' + topic]))
  await admin.disconnect()
  console.log(JSON.stringify(out))
}

main().catch(e => { console.error(e); process.exit(1) })
