"""The RocketMQ remoting transport: frames, codes, the bounded TCP server, its TLS and ACL, the
route answers; the broker's remoting front end and the NameServer both serve on it."""
