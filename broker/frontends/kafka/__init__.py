"""The Kafka wire protocol front end: see README.md."""
