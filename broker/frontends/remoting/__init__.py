"""RocketMQ 4.x "remoting" protocol, sans-IO: codes, frames and the custom headers of the send
and pull paths. No sockets here; see README.md in this folder."""
