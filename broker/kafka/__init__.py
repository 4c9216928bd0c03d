"""The Kafka wire protocol front end (issue 65): see README.md."""
