// Only marks this directory as a module root: grpc-acl.sh builds it with -modfile=../../grpc-go/go.mod, so the Go
// SDK (github.com/apache/rocketmq-clients/golang/v5) and everything else come pinned by grpc-go's go.mod and go.sum.
module conveyor/compat-grpc-go

go 1.25
