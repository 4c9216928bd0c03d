"""The wire port: wharf.v1 (and the other services) over the Wharf wire protocol."""
