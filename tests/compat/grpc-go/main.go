// The gRPC checks of the official Go 5.x SDK (github.com/apache/rocketmq-clients/golang/v5), one program per
// argument, as grpc-java has one class per program: Producers, SimpleConsumers, PushConsumers, FifoPush.
package main

import (
	"fmt"
	"os"
)

func main() {
	programs := map[string]func(){
		"Producers":       producersMain,
		"SimpleConsumers": simpleConsumersMain,
		"PushConsumers":   pushConsumersMain,
		"FifoPush":        fifoPushMain,
	}
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println(clientVersion)
		return
	}
	if len(os.Args) != 2 || programs[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: compat-grpc-go version|Producers|SimpleConsumers|PushConsumers|FifoPush")
		os.Exit(2)
	}
	os.Setenv("GRPC_PROGRAM", os.Args[1])
	setupSDK()
	programs[os.Args[1]]()
}
