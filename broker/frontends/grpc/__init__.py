"""The gRPC front end: one grpc.aio server serving the mounted services (``../mounts.py``:
wharf.v1 messaging and admin, apache.rocketmq.v2) and the health service."""
