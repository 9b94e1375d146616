"""The "grpc+verbs" protocol of the seeds, one module per component (see RdmaRemoteRendezvous)."""
