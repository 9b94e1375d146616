"""The gRPC control plane: .proto files and their messages, the service, peers, the "grpc" path."""
