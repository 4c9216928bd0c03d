"""Consumers: :class:`~client.consumer.push.PushConsumer` and :class:`~client.consumer.pull.PullConsumer`."""
